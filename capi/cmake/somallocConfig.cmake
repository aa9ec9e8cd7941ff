# The CMake package `somalloc`: somalloc's C library with one backend, as
# the imported target somalloc::somalloc. Installed by capi/install.sh with
# either backend (the same file for both; do not edit).
#
#   find_package(somalloc 0.1 REQUIRED)                    # this prefix's default backend
#   find_package(somalloc 0.1 REQUIRED COMPONENTS rocm)    # a named one: cuda or rocm
#   target_link_libraries(app PRIVATE somalloc::somalloc)
#
# The backend is the component named (one: a program links one backend),
# else the variable SOMALLOC_BACKEND (cuda or rocm, e.g. -DSOMALLOC_BACKEND=rocm),
# else the one installed in this prefix, or where both are, the prefix's
# default (the one installed first; `capi/install.sh --default` changes it).
# It loads the backend's own package (somalloc-cuda or somalloc-rocm, beside
# this one), which makes somalloc::cuda or somalloc::rocm, and sets
# somalloc_BACKEND to the backend found.

set(_somalloc_backends cuda rocm)
set(_somalloc_backend "")
if(somalloc_FIND_COMPONENTS)
  list(LENGTH somalloc_FIND_COMPONENTS _somalloc_n)
  list(GET somalloc_FIND_COMPONENTS 0 _somalloc_backend)
  if(_somalloc_n GREATER 1)
    set(somalloc_FOUND FALSE)
    set(somalloc_NOT_FOUND_MESSAGE
      "one backend per program: COMPONENTS cuda or rocm, not ${somalloc_FIND_COMPONENTS} (both export the same symbols)")
    return()
  endif()
elseif(SOMALLOC_BACKEND)
  set(_somalloc_backend "${SOMALLOC_BACKEND}")
else()
  # The backends installed here; with both, the prefix's default.
  set(_somalloc_installed "")
  foreach(_somalloc_b IN LISTS _somalloc_backends)
    if(EXISTS "${CMAKE_CURRENT_LIST_DIR}/../somalloc-${_somalloc_b}/somalloc-${_somalloc_b}Config.cmake")
      list(APPEND _somalloc_installed ${_somalloc_b})
    endif()
  endforeach()
  list(LENGTH _somalloc_installed _somalloc_n)
  if(_somalloc_n EQUAL 1)
    set(_somalloc_backend "${_somalloc_installed}")
  elseif(_somalloc_n GREATER 1)
    include("${CMAKE_CURRENT_LIST_DIR}/somalloc-default.cmake" OPTIONAL)
    # (list(FIND), not IN_LIST: the caller's policies may predate it.)
    list(FIND _somalloc_installed "${_somalloc_default_backend}" _somalloc_at)
    if(_somalloc_at GREATER -1)
      set(_somalloc_backend "${_somalloc_default_backend}")
    else()
      list(GET _somalloc_installed 0 _somalloc_backend)
    endif()
  else()
    set(somalloc_FOUND FALSE)
    set(somalloc_NOT_FOUND_MESSAGE
      "no backend of somalloc is installed beside ${CMAKE_CURRENT_LIST_DIR} (bash capi/install.sh --backend cuda|rocm --prefix ...)")
    return()
  endif()
endif()
list(FIND _somalloc_backends "${_somalloc_backend}" _somalloc_at)
if(_somalloc_at EQUAL -1)
  set(somalloc_FOUND FALSE)
  set(somalloc_NOT_FOUND_MESSAGE "'${_somalloc_backend}' is no backend of somalloc: cuda or rocm")
  return()
endif()

find_package(somalloc-${_somalloc_backend} ${somalloc_VERSION} EXACT CONFIG QUIET
  PATHS "${CMAKE_CURRENT_LIST_DIR}/.." NO_DEFAULT_PATH)
if(NOT somalloc-${_somalloc_backend}_FOUND)
  set(somalloc_FOUND FALSE)
  set(somalloc_NOT_FOUND_MESSAGE
    "the ${_somalloc_backend} build of somalloc ${somalloc_VERSION} is not installed beside ${CMAKE_CURRENT_LIST_DIR} (bash capi/install.sh --backend ${_somalloc_backend} --prefix ...)")
  return()
endif()
get_target_property(_somalloc_links somalloc::somalloc INTERFACE_LINK_LIBRARIES)
if(NOT _somalloc_links STREQUAL "somalloc::${_somalloc_backend}")
  set(somalloc_FOUND FALSE)
  set(somalloc_NOT_FOUND_MESSAGE
    "somalloc::somalloc is ${_somalloc_links} already (found before); a program links one backend")
  return()
endif()

set(somalloc_BACKEND "${_somalloc_backend}")
set(somalloc_${_somalloc_backend}_FOUND TRUE)
set(somalloc_INCLUDE_DIRS "${somalloc-${_somalloc_backend}_INCLUDE_DIRS}")
set(somalloc_LIBRARIES somalloc::somalloc)
unset(_somalloc_backend)
unset(_somalloc_backends)
unset(_somalloc_installed)
unset(_somalloc_links)
unset(_somalloc_n)
unset(_somalloc_at)
unset(_somalloc_b)
unset(_somalloc_default_backend)
