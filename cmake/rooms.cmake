# app/rooms.cmake — the two functions app/CMakeLists.txt declares app/'s rooms and programs with
# (docs/design.md "Rooms the build enforces"); included there and by the test tests/rooms, which
# builds a two-room project with them to show a forbidden include failing the build.
set(LLMTRAIN_ROOM_CHECK ${CMAKE_CURRENT_LIST_DIR}/room_check.cmake)
set(LLMTRAIN_APP_ROOMS "")  # the rooms declared so far, bottom to top

# llmtrain_app_room(<name> OWNS <include paths> GLOBS <patterns> [MAINS <files>]
#                   [ROOMS <rooms>] [PATHS <include paths>] [PUBLIC <libs>] [PRIVATE <libs>])
# Defines the static library llmtrain_app_<name> (llmtrain_app for the room "top") from the room's
# files: those the GLOBS match. Its .cpp files but MAINS (the
# room's programs, added by llmtrain_app_main) make the library, linked PUBLIC to the libraries of
# ROOMS and to PUBLIC, PRIVATE to PRIVATE. OWNS: the include paths that are this room's (what a
# room naming it may include; a "/"-terminated entry is a folder). The check target
# llmtrain_app_<name>_includes runs app/room_check.cmake over every file
# of the room (headers and MAINS too) with OWNS + the OWNS of each room in ROOMS + PATHS as the
# allowed list (written to <build>/app/rooms/<name>.rules.cmake); the library and the room's
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

  set(_rules ${CMAKE_CURRENT_BINARY_DIR}/rooms/${name}.rules.cmake)
  file(CONFIGURE OUTPUT ${_rules} CONTENT "set(ROOM \"${name}\")\nset(ROOM_FILES \"${_files}\")\nset(ROOM_ALLOWED \"${_allowed}\")\n")
  set(_stamp ${CMAKE_CURRENT_BINARY_DIR}/rooms/${name}.checked)
  add_custom_command(OUTPUT ${_stamp}
    COMMAND ${CMAKE_COMMAND} -DRULES=${_rules} -DSTAMP=${_stamp} -P ${LLMTRAIN_ROOM_CHECK}
    DEPENDS ${_files} ${_rules} ${LLMTRAIN_ROOM_CHECK}
    COMMENT "app/ room '${name}': checking its includes" VERBATIM)
  add_custom_target(llmtrain_app_${name}_includes DEPENDS ${_stamp})

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
# library (and libs), built only after the room's include check passed.
function(llmtrain_app_main program room main)
  add_executable(${program} ${main})
  target_link_libraries(${program} PRIVATE ${LLMTRAIN_APP_ROOM_TARGET_${room}} ${ARGN})
  add_dependencies(${program} llmtrain_app_${room}_includes)
endfunction()

