// The largest CPU tensor allocation cleave attempts.
//
// By default a tensor larger than the machine's memory and swap is an Error naming its bytes (a
// shape read from a file, a wrong batch size), rather than an allocation the kernel may grant and
// kill the process for later. A program that reads untrusted input -- a service parsing IR text
// or checkpoints, the fuzz targets of fuzz/ -- can set a lower limit, so that a small file
// asking for gigabytes is refused with the same Error.
#pragma once

#include <cstddef>

namespace cleave {

// The limit in bytes: the machine's memory and swap unless set_cpu_allocation_limit lowered it.
size_t cpu_allocation_limit();
// Sets the limit for the whole process; 0 restores the default. Tensors already allocated are
// kept.
void set_cpu_allocation_limit(size_t bytes);

}  // namespace cleave
