# The Python module `rfaas` (rfaas/python/): option RFAAS_BUILD_PYTHON.
#
# Built for Debian's interpreter, /usr/bin/python3 (python3-dev,
# python3-pybind11, pybind11-dev), not for whatever python3 is first on PATH:
# a module only imports into the interpreter whose headers and ABI it was
# built with. Pass -DPython3_EXECUTABLE=... to build for another one.
#
# Without RFAAS_BUILD_PYTHON on the command line, the module is built when
# pybind11 and the interpreter's headers are found, and skipped with a message
# saying what is missing otherwise. -DRFAAS_BUILD_PYTHON=ON makes a missing
# piece an error. The sanitizer build skips it by default: the module would
# only load into a Python started with libasan preloaded.
if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH
      "Python interpreter the rfaas module is built for (Debian's by default)")
endif()

set(rfaas_python_missing "")
find_package(Python3 COMPONENTS Interpreter Development.Module QUIET)
if(NOT Python3_Interpreter_FOUND)
  set(rfaas_python_missing "no Python 3 interpreter (python3)")
elseif(NOT Python3_Development.Module_FOUND)
  set(rfaas_python_missing "no headers for ${Python3_EXECUTABLE} (python3-dev)")
else()
  find_package(pybind11 CONFIG QUIET)
  if(NOT pybind11_FOUND)
    set(rfaas_python_missing "no pybind11 (python3-pybind11, pybind11-dev)")
  endif()
endif()

if(NOT DEFINED RFAAS_BUILD_PYTHON)
  if(rfaas_python_missing)
    message(STATUS "rFaaS: the Python module is not built: ${rfaas_python_missing}; "
                   "scripts/install-deps.sh installs what it needs")
    set(rfaas_python_default OFF)
  elseif(RFAAS_SANITIZE)
    message(STATUS "rFaaS: the Python module is not built in a sanitizer build "
                   "(-DRFAAS_BUILD_PYTHON=ON builds it; it loads only with libasan preloaded)")
    set(rfaas_python_default OFF)
  else()
    set(rfaas_python_default ON)
  endif()
endif()
option(RFAAS_BUILD_PYTHON "Build the Python module rfaas (pybind11)" ${rfaas_python_default})

if(RFAAS_BUILD_PYTHON)
  if(rfaas_python_missing)
    message(FATAL_ERROR "RFAAS_BUILD_PYTHON is ON but there is ${rfaas_python_missing}. "
                        "Install it (scripts/install-deps.sh) or configure with "
                        "-DRFAAS_BUILD_PYTHON=OFF.")
  endif()
  message(STATUS "rFaaS: Python module for ${Python3_EXECUTABLE} (${Python3_VERSION}), "
                 "pybind11 ${pybind11_VERSION}")
  # Where `cmake --install` puts the module, relative to the prefix: a place
  # on the interpreter's own search path. Debian's Python searches
  # lib/python3/dist-packages under /usr (where its packages go) and
  # lib/python3.X/dist-packages under /usr/local; any other Python
  # lib/python3.X/site-packages.
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print('deb_system' in sysconfig.get_scheme_names())"
    OUTPUT_VARIABLE rfaas_python_debian OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(rfaas_python_version "${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}")
  if(rfaas_python_debian STREQUAL "True" AND CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(rfaas_python_dir lib/python3/dist-packages)
  elseif(rfaas_python_debian STREQUAL "True")
    set(rfaas_python_dir lib/python${rfaas_python_version}/dist-packages)
  else()
    set(rfaas_python_dir lib/python${rfaas_python_version}/site-packages)
  endif()
  set(RFAAS_PYTHON_INSTALL_DIR ${rfaas_python_dir} CACHE STRING
      "Where the Python module is installed, relative to CMAKE_INSTALL_PREFIX")
endif()
