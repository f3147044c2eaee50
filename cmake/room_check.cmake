# cmake/room_check.cmake — the check that makes the rooms' include rules part of the build
# (docs/design.md "Rooms the build enforces"). Run as a script:
#
#   cmake -DRULES=<room>.rules.cmake [-DFILES=<a;b;...>] [-DSTAMP=<file>] -P app/room_check.cmake
#
# RULES is the file cmake/rooms.cmake (llmtrain_room_check) writes for one room at configure time;
# it sets ROOM (the room's name), ROOM_FILES (absolute paths of the room's sources and headers) and
# ROOM_ALLOWED (the include paths the room may name: a prefix ending in "/" allows a folder,
# "!<prefix>" forbids a folder the others allow, e.g. "model/ !model/cuda/", any other entry allows
# one file). FILES, when given, replaces ROOM_FILES (the test, tests/rooms/room_check_test.cmake,
# plants a file there).
#
# Every `#include "x"` or `#include <x>` whose first path component is one of the repository's code
# folders (app, model, optim, parallel, data, emu, tests, tools) must match an entry of ROOM_ALLOWED
# and no "!" entry;
# includes of anything else (the standard library, system packages) are not checked. So tests/, tools/
# and the emulator (emu/) are never reachable from product code unless a room's rules list them (none does).
# Output (stderr): each offending line as
#   <file>:<line>: #include "x" — room '<room>' may include only: <ROOM_ALLOWED, "!p" as "except p">
# then a fatal error (cmake exits non-zero, so the build of the room's library stops); STAMP is
# written (touched) only when every file passes.
cmake_minimum_required(VERSION 3.25)

if(NOT RULES)
  message(FATAL_ERROR "room_check: -DRULES=<room>.rules.cmake is required")
endif()
include(${RULES})
if(DEFINED FILES)
  set(ROOM_FILES ${FILES})
endif()

set(_code_folders app model optim parallel data emu tests tools)
set(_bad "")
foreach(_file IN LISTS ROOM_FILES)
  if(NOT EXISTS ${_file})
    continue()  # a globbed file removed since configure: the next configure drops it
  endif()
  # One list element per line: the characters CMake lists treat specially (; [ ] \) go first (no
  # include path has them), so line numbers stay right.
  file(READ ${_file} _text)
  foreach(_special ";" "[" "]" "\\")
    string(REPLACE "${_special}" "" _text "${_text}")
  endforeach()
  string(REPLACE "\n" ";" _lines "${_text}")
  set(_n 0)
  foreach(_line IN LISTS _lines)
    math(EXPR _n "${_n} + 1")
    if(NOT _line MATCHES "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]+)[\">]")
      continue()
    endif()
    set(_inc ${CMAKE_MATCH_1})
    string(REGEX REPLACE "/.*" "" _top "${_inc}")
    if(NOT _inc MATCHES "/" OR NOT _top IN_LIST _code_folders)
      continue()
    endif()
    set(_ok FALSE)
    set(_denied FALSE)
    foreach(_allowed IN LISTS ROOM_ALLOWED)
      if(_allowed MATCHES "^!(.*)$")
        string(FIND "${_inc}" "${CMAKE_MATCH_1}" _at)
        if(_at EQUAL 0)
          set(_denied TRUE)
        endif()
      elseif(_allowed MATCHES "/$")
        string(FIND "${_inc}" "${_allowed}" _at)
        if(_at EQUAL 0)
          set(_ok TRUE)
        endif()
      elseif(_inc STREQUAL _allowed)
        set(_ok TRUE)
      endif()
    endforeach()
    if(NOT _ok OR _denied)
      list(JOIN ROOM_ALLOWED " " _rule)
      string(REGEX REPLACE "(^| )!" "\\1except " _rule "${_rule}")
      string(APPEND _bad "${_file}:${_n}: #include \"${_inc}\" — room '${ROOM}' may include only: ${_rule}\n")
    endif()
  endforeach()
endforeach()

if(_bad)
  message("${_bad}")  # unformatted, one line per include
  message(FATAL_ERROR "room '${ROOM}': an include the room's rule does not allow (above; app/CMakeLists.txt or "
                      "cmake/layers.cmake, docs/design.md \"Rooms the build enforces\")")
endif()
if(STAMP)
  file(TOUCH ${STAMP})
endif()
