// create_process_group: the backend by name.
#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"
#include "comm/backends.h"

namespace cleave::comm {

namespace {
std::string available_list() {
  std::string list = "\"gloo\", \"inproc\"";
  if (backend_available("mpi")) list += ", \"mpi\"";
  if (backend_available("nccl")) list += ", \"nccl\"";
  return list;
}
}  // namespace

bool backend_available(const std::string& backend) {
  if (backend == "gloo" || backend == "inproc") return true;
#ifdef CLEAVE_HAVE_MPI
  if (backend == "mpi") return true;
#endif
#ifdef CLEAVE_HAVE_NCCL
  if (backend == "nccl") return true;
#endif
  return false;
}

std::shared_ptr<ProcessGroup> create_process_group(const ProcessGroupOptions& options) {
  if (options.backend == "gloo") return make_gloo_group(options);
  if (options.backend == "inproc") return make_inproc_group(options);
#ifdef CLEAVE_HAVE_MPI
  if (options.backend == "mpi") return make_mpi_group(options);
#endif
#ifdef CLEAVE_HAVE_NCCL
  if (options.backend == "nccl") return make_nccl_group(options);
#endif
  if (options.backend == "hccl") {
    CLEAVE_UNIMPLEMENTED(
        "create_process_group('{}'): backend \"hccl\" (Ascend) is not available in cleave; "
        "available backends: {}",
        options.name, available_list());
  }
  if (options.backend == "mpi" || options.backend == "nccl") {
    CLEAVE_UNIMPLEMENTED(
        "create_process_group('{}'): backend \"{}\" is not available in this build; "
        "available backends: {}",
        options.name, options.backend, available_list());
  }
  CLEAVE_FAIL(
      "create_process_group('{}'): unknown backend \"{}\"; expected one of \"gloo\", \"inproc\", "
      "\"mpi\", \"nccl\" (available in this build: {})",
      options.name, options.backend, available_list());
}

}  // namespace cleave::comm
