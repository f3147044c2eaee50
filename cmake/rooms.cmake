# cmake/rooms.cmake — the rooms the build enforces (docs/design.md "Rooms the build enforces"): every
# folder of product code is a room whose includes are checked as part of its build. Two functions
# declare them: llmtrain_app_room (app/CMakeLists.txt: app/'s rooms, each its own library) and
# llmtrain_room (cmake/layers.cmake: model/, model/cpu, model/cuda, optim/, parallel/, data/, emu/,
# whose libraries their own folders define). Included by the top-level CMakeLists.txt and by the
# test tests/rooms, which builds a small project with them to show a forbidden include failing the build.
set(LLMTRAIN_ROOM_CHECK ${CMAKE_CURRENT_LIST_DIR}/room_check.cmake)
set(LLMTRAIN_APP_ROOMS "")  # app/'s rooms declared so far, bottom to top

# llmtrain_room_check(<name> <check target> FILES <files> ALLOWED <include paths>): the check target
# runs cmake/room_check.cmake over FILES with ALLOWED as the allowed list (an entry ending in "/" a
# folder, "!<prefix>" a folder excluded from the others, any other entry one file), written to
# <build>/rooms/<name>.rules.cmake ("/" in name as "_"); it reruns when a file or the rules change.
function(llmtrain_room_check name check)
  cmake_parse_arguments(R "" "" "FILES;ALLOWED" ${ARGN})
  string(REPLACE "/" "_" _file_name "${name}")
  set(_rules ${CMAKE_BINARY_DIR}/rooms/${_file_name}.rules.cmake)
  file(CONFIGURE OUTPUT ${_rules} CONTENT "set(ROOM \"${name}\")\nset(ROOM_FILES \"${R_FILES}\")\nset(ROOM_ALLOWED \"${R_ALLOWED}\")\n")
  set(_stamp ${CMAKE_BINARY_DIR}/rooms/${_file_name}.checked)
  add_custom_command(OUTPUT ${_stamp}
    COMMAND ${CMAKE_COMMAND} -DRULES=${_rules} -DSTAMP=${_stamp} -P ${LLMTRAIN_ROOM_CHECK}
    DEPENDS ${R_FILES} ${_rules} ${LLMTRAIN_ROOM_CHECK}
    COMMENT "room '${name}': checking its includes" VERBATIM)
  add_custom_target(${check} DEPENDS ${_stamp})
endfunction()

# llmtrain_room(<name> GLOBS <patterns> ALLOWED <include paths> TARGETS <targets>)
# A room whose library is defined elsewhere: its files are those the GLOBS match (CONFIGURE_DEPENDS,
# so a new file joins at the next build); the check target llmtrain_room_<name>_includes ("/" as
# "_") checks them against ALLOWED, and each of TARGETS that exists depends on it, so none is built
# while the check fails. Errors: FATAL_ERROR at configure when the GLOBS match nothing.
function(llmtrain_room name)
  cmake_parse_arguments(R "" "" "GLOBS;ALLOWED;TARGETS" ${ARGN})
  file(GLOB _files CONFIGURE_DEPENDS ${R_GLOBS})
  if(NOT _files)
    message(FATAL_ERROR "room '${name}': no file matches ${R_GLOBS}")
  endif()
  string(REPLACE "/" "_" _id "${name}")
  llmtrain_room_check(${name} llmtrain_room_${_id}_includes FILES ${_files} ALLOWED ${R_ALLOWED})
  foreach(_t IN LISTS R_TARGETS)
    if(TARGET ${_t})
      add_dependencies(${_t} llmtrain_room_${_id}_includes)
    endif()
  endforeach()
endfunction()

# llmtrain_app_room(<name> OWNS <include paths> GLOBS <patterns> [MAINS <files>]
#                   [ROOMS <rooms>] [PATHS <include paths>] [PUBLIC <libs>] [PRIVATE <libs>])
# Defines the static library llmtrain_app_<name> (llmtrain_app for the room "top") from the room's
# files: those the GLOBS match. Its .cpp files but MAINS (the
# room's programs, added by llmtrain_app_main) make the library, linked PUBLIC to the libraries of
# ROOMS and to PUBLIC, PRIVATE to PRIVATE. OWNS: the include paths that are this room's (what a
# room naming it may include; a "/"-terminated entry is a folder). The check target
# llmtrain_app_<name>_includes runs cmake/room_check.cmake over every file
# of the room (headers and MAINS too) with OWNS + the OWNS of each room in ROOMS + PATHS as the
# allowed list (llmtrain_room_check: <build>/rooms/<name>.rules.cmake); the library and the room's
# programs depend on it, so they are not built while it fails. Errors: FATAL_ERROR at configure for
# a room in ROOMS not declared yet (rooms go bottom to top).
function(llmtrain_app_room name)
  cmake_parse_arguments(R "" "" "OWNS;GLOBS;MAINS;ROOMS;PATHS;PUBLIC;PRIVATE" ${ARGN})
  file(GLOB _files CONFIGURE_DEPENDS ${R_GLOBS})
  set(_allowed ${R_OWNS})
  set(_rooms "")
  foreach(_r IN LISTS R_ROOMS)
    if(NOT _r IN_LIST LLMTRAIN_APP_ROOMS)
      message(FATAL_ERROR "app/ room '${name}' names room '${_r}', not declared before it (rooms go bottom to top)")
    endif()
    list(APPEND _allowed ${LLMTRAIN_APP_ROOM_OWNS_${_r}})
    list(APPEND _rooms ${LLMTRAIN_APP_ROOM_TARGET_${_r}})
  endforeach()
  list(APPEND _allowed ${R_PATHS})
  set(_target llmtrain_app_${name})
  if(name STREQUAL "top")
    set(_target llmtrain_app)
  endif()

  llmtrain_room_check(${name} llmtrain_app_${name}_includes FILES ${_files} ALLOWED ${_allowed})

  set(_sources ${_files})
  list(FILTER _sources INCLUDE REGEX "\\.cpp$")
  if(R_MAINS)
    list(REMOVE_ITEM _sources ${R_MAINS})
  endif()
  add_library(${_target} STATIC ${_sources})
  add_dependencies(${_target} llmtrain_app_${name}_includes)
  target_link_libraries(${_target} PUBLIC llmtrain_root ${_rooms} ${R_PUBLIC})
  if(R_PRIVATE)
    target_link_libraries(${_target} PRIVATE ${R_PRIVATE})
  endif()
  set(LLMTRAIN_APP_ROOMS ${LLMTRAIN_APP_ROOMS} ${name} PARENT_SCOPE)
  set(LLMTRAIN_APP_ROOM_OWNS_${name} ${R_OWNS} PARENT_SCOPE)
  set(LLMTRAIN_APP_ROOM_TARGET_${name} ${_target} PARENT_SCOPE)
endfunction()

# llmtrain_app_main(<program> <room> <main.cpp> [libs...]): a program of a room, linked to the room's
# library (llmtrain_app_<room>, llmtrain_app for "top") and libs, built only after the room's
# include check passed. Callable from any directory after app/ declared the room (cmake/programs.cmake).
function(llmtrain_app_main program room main)
  set(_lib llmtrain_app_${room})
  if(room STREQUAL "top")
    set(_lib llmtrain_app)
  endif()
  add_executable(${program} ${main})
  target_link_libraries(${program} PRIVATE ${_lib} ${ARGN})
  add_dependencies(${program} llmtrain_app_${room}_includes)
endfunction()
