// The machine profile shipped with cleave (src/parallel/default_machine_profile.json), compiled
// into the library: CMake writes it into a generated source (CMakeLists.txt, "default machine
// profile"). Internal to parallel.
#pragma once

#include <string_view>

namespace cleave::parallel {

// The text of src/parallel/default_machine_profile.json.
std::string_view default_machine_profile_json();

}  // namespace cleave::parallel
