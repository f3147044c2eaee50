# tests/rooms/file_map_test.cmake — ctest design_file_map (tests/rooms/CMakeLists.txt): docs/design.md
# "The files" names every product file.
#
#   cmake -DSOURCE_DIR=<repo> -P file_map_test.cmake
#
# The section is a list of bullets, one per folder, each starting with the folder in backquotes
# (- `app/config/`: ...). A file <folder>/<name> of app/, model/, optim/, parallel/, data/ or emu/
# (.cpp, .hpp, .h, .cu, .cuh) is named when its folder's bullet has a backquoted token equal to
# <name>, or a pattern matching it: `zero.*` (any extension), `cuda_ops_*.cu` (* is any letters).
# Output: one line per file no bullet names, then a fatal error; or the count of files checked.
# No compiler, no build: well under a second.
cmake_minimum_required(VERSION 3.25)

file(READ ${SOURCE_DIR}/docs/design.md _doc)
string(FIND "${_doc}" "\n## The files\n" _at)
if(_at LESS 0)
  message(FATAL_ERROR "docs/design.md has no section '## The files'")
endif()
math(EXPR _at "${_at} + 1")
string(SUBSTRING "${_doc}" ${_at} -1 _section)
string(FIND "${_section}" "\n## " _end)
if(_end GREATER -1)
  string(SUBSTRING "${_section}" 0 ${_end} _section)
endif()
foreach(_special ";" "[" "]" "\\")
  string(REPLACE "${_special}" "" _section "${_section}")
endforeach()
string(REPLACE "\n- `" ";`" _bullets "${_section}")
list(POP_FRONT _bullets)  # the section's introduction

set(_folders "")
foreach(_bullet IN LISTS _bullets)
  if(NOT _bullet MATCHES "^`([a-z_/]+/)`")
    message(FATAL_ERROR "docs/design.md \"The files\": a bullet that does not start with a `folder/`: ${_bullet}")
  endif()
  set(_folder ${CMAKE_MATCH_1})
  list(APPEND _folders ${_folder})
  string(REGEX MATCHALL "`[A-Za-z0-9_.*-]+`" _tokens "${_bullet}")
  set(_patterns "")
  foreach(_token IN LISTS _tokens)
    string(REPLACE "`" "" _token "${_token}")
    string(REPLACE "." "\\." _token "${_token}")
    string(REPLACE "*" "[A-Za-z0-9_]*" _token "${_token}")
    string(REPLACE "\\.[A-Za-z0-9_]*" "\\.[a-z]+" _token "${_token}")  # name.* : any extension
    list(APPEND _patterns "^${_token}$")
  endforeach()
  set(_patterns_${_folder} ${_patterns})
endforeach()

file(GLOB_RECURSE _files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/app/* ${SOURCE_DIR}/model/* ${SOURCE_DIR}/optim/* ${SOURCE_DIR}/parallel/*
     ${SOURCE_DIR}/data/* ${SOURCE_DIR}/emu/*)
list(FILTER _files INCLUDE REGEX "\\.(cpp|hpp|h|cu|cuh)$")
set(_missing "")
set(_n 0)
foreach(_file IN LISTS _files)
  math(EXPR _n "${_n} + 1")
  get_filename_component(_name ${_file} NAME)
  string(REGEX REPLACE "[^/]+$" "" _folder "${_file}")
  set(_named FALSE)
  foreach(_pattern IN LISTS _patterns_${_folder})
    if(_name MATCHES "${_pattern}")
      set(_named TRUE)
      break()
    endif()
  endforeach()
  if(NOT _named)
    string(APPEND _missing "${_file}: not named in docs/design.md \"The files\" (bullet `${_folder}`)\n")
  endif()
endforeach()
if(_missing)
  message("${_missing}")
  message(FATAL_ERROR "docs/design.md \"The files\" does not name every product file (above)")
endif()
message(STATUS "docs/design.md names all ${_n} files of app/, model/, optim/, parallel/, data/ and emu/")
