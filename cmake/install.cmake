# `cmake --install` (included by the top CMakeLists.txt when CLEAVE_INSTALL is on): headers,
# libraries, the CMake package (cleaveConfig.cmake, its version file, the exported targets) and
# cleave.pc, in the GNUInstallDirs places under the install prefix:
#
#   include/cleave/...                         the public headers
#   <libdir>/libcleave_<layer>.{a,so}          one library per layer (CLEAVE_LAYERS)
#   <libdir>/cmake/cleave/cleaveConfig.cmake   find_package(cleave CONFIG)
#   <libdir>/pkgconfig/cleave.pc               pkg-config --cflags --libs cleave
#   bin/cleave-run, cleave-ir, cleave-datagen  the tools (tools/CMakeLists.txt)
#
# <libdir> is lib, or lib/<multiarch> for the prefix /usr on Debian.
include(CMakePackageConfigHelpers)

set(_cleave_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/cleave)
set(_cleave_layer_targets "")
foreach(layer IN LISTS CLEAVE_LAYERS)
  list(APPEND _cleave_layer_targets cleave_${layer})
endforeach()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/cleave DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(TARGETS cleave ${_cleave_layer_targets} EXPORT cleaveTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT cleaveTargets NAMESPACE cleave:: DESTINATION ${_cleave_cmake_dir})

# What cleaveConfig.cmake.in asks about this build.
get_target_property(_cleave_core_type cleave_core TYPE)
if(_cleave_core_type STREQUAL "STATIC_LIBRARY")
  set(CLEAVE_STATIC_LIBRARIES ON)
else()
  set(CLEAVE_STATIC_LIBRARIES OFF)
endif()
if(MPI_CXX_FOUND)
  set(CLEAVE_LINKS_MPI ON)
else()
  set(CLEAVE_LINKS_MPI OFF)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/cleaveConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/package/cleaveConfig.cmake
                              INSTALL_DESTINATION ${_cleave_cmake_dir})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/cleaveConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/cleaveConfig.cmake
              ${PROJECT_BINARY_DIR}/package/cleaveConfigVersion.cmake
        DESTINATION ${_cleave_cmake_dir})

# ---- cleave.pc ----
# NOTE [cleave.pc from the link libraries]
# The pkg-config file says what the CMake package says, derived from the same target properties:
# every dependency a layer links (LINK_LIBRARIES) is public when the layer's
# INTERFACE_LINK_LIBRARIES names it as is, private otherwise (NOTE [Private dependencies of a
# static cleave] in cleaveConfig.cmake.in). A dependency with a pkg-config file of its own goes
# into Requires; any other becomes a linker argument (its library file, or its flags). Private
# ones go into Requires and Libs for static libraries, which cannot be linked without them, and
# are left out for shared ones, which link them themselves.
set(_pc_packages_of_gRPC::grpc++ grpc++)
set(_pc_packages_of_protobuf::libprotobuf protobuf)
set(_pc_packages_of_fmt::fmt fmt)
set(_pc_header_only nlohmann_json::nlohmann_json)

set(_pc_requires "")
set(_pc_libs "")
set(_pc_cflags "")
foreach(target IN LISTS _cleave_layer_targets)
  get_target_property(_links ${target} LINK_LIBRARIES)
  get_target_property(_interface ${target} INTERFACE_LINK_LIBRARIES)
  foreach(dep IN LISTS _links)
    if(dep MATCHES "^cleave_" OR dep IN_LIST _pc_header_only)
      continue()
    endif()
    if(NOT CLEAVE_STATIC_LIBRARIES AND NOT dep IN_LIST _interface)
      continue()  # private: the shared library links it itself
    endif()
    if(DEFINED _pc_packages_of_${dep})
      list(APPEND _pc_requires ${_pc_packages_of_${dep}})
    elseif(dep STREQUAL "OpenMP::OpenMP_CXX")
      list(APPEND _pc_cflags ${OpenMP_CXX_FLAGS})
      list(APPEND _pc_libs ${OpenMP_CXX_FLAGS})
    elseif(dep STREQUAL "Threads::Threads")
      list(APPEND _pc_libs ${CMAKE_THREAD_LIBS_INIT})
    elseif(dep STREQUAL "MPI::MPI_CXX")
      list(APPEND _pc_libs ${MPI_CXX_LIBRARIES})
    elseif(TARGET ${dep})
      list(APPEND _pc_libs "$<TARGET_LINKER_FILE:${dep}>")
    else()  # a library file
      list(APPEND _pc_libs ${dep})
    endif()
  endforeach()
endforeach()

set(_pc_cleave_libs "")
foreach(layer IN LISTS CLEAVE_LAYERS)
  get_target_property(_type cleave_${layer} TYPE)
  if(NOT _type STREQUAL "INTERFACE_LIBRARY")
    list(APPEND _pc_cleave_libs -lcleave_${layer})
  endif()
endforeach()
# NOTE [The CUDA allocator in every program] (top CMakeLists.txt): the anchor of a static
# libcleave_kernels.a; a shared libcleave_kernels.so linked with --no-as-needed.
if(CLEAVE_WITH_CUDA AND CLEAVE_STATIC_LIBRARIES)
  list(PREPEND _pc_cleave_libs "-Wl,--undefined=cleave_cuda_runtime_anchor")
elseif(CLEAVE_WITH_CUDA)
  list(PREPEND _pc_cleave_libs "-Wl,--push-state,--no-as-needed")
  list(APPEND _pc_cleave_libs "-Wl,--pop-state")
endif()
# NOTE [Registrations survive static linking] (src/parallel/rules/registrations.cc): the anchors
# of the layers that attach parts to the registry's entries; shared libraries are kept whole
# (--no-as-needed) instead.
if(CLEAVE_STATIC_LIBRARIES)
  list(PREPEND _pc_cleave_libs "-Wl,--undefined=cleave_parallel_registrations_anchor"
       "-Wl,--undefined=cleave_runtime_registrations_anchor")
elseif(NOT CLEAVE_WITH_CUDA)
  list(PREPEND _pc_cleave_libs "-Wl,--push-state,--no-as-needed")
  list(APPEND _pc_cleave_libs "-Wl,--pop-state")
endif()
if(NOT CLEAVE_STATIC_LIBRARIES)
  # The libraries are found at run time without LD_LIBRARY_PATH, wherever the prefix is.
  list(PREPEND _pc_cleave_libs -Wl,-rpath,\${libdir})
endif()
list(PREPEND _pc_libs ${_pc_cleave_libs})
if(CLEAVE_WITH_CUDA)
  list(APPEND _pc_cflags -DCLEAVE_HAVE_CUDA=1)
endif()
if(CLEAVE_SANITIZE)
  list(APPEND _pc_libs -fsanitize=${CLEAVE_SANITIZE})  # as cleave::cleave carries it
endif()
foreach(var _pc_requires _pc_libs _pc_cflags)
  list(REMOVE_DUPLICATES ${var})
  string(TOUPPER "CLEAVE${var}" _name)
  list(JOIN ${var} " " ${_name})
endforeach()
# ${pcfiledir} is <libdir>/pkgconfig: the prefix is found from there, so that the file stays right
# under any `cmake --install --prefix`.
file(RELATIVE_PATH CLEAVE_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" CLEAVE_PC_TO_PREFIX "${CLEAVE_PC_TO_PREFIX}")
configure_file(${CMAKE_CURRENT_LIST_DIR}/cleave.pc.in ${PROJECT_BINARY_DIR}/package/cleave.pc.in
               @ONLY)
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/package/cleave.pc
     INPUT ${PROJECT_BINARY_DIR}/package/cleave.pc.in)
install(FILES ${PROJECT_BINARY_DIR}/package/cleave.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
