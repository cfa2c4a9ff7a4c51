# Runs a lab's starter test binary (BIN) and checks that it builds and fails the way a fresh
# starter must: every test fails, and the output says "not implemented yet: <function>".
execute_process(COMMAND "${BIN}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
set(all "${out}${err}")
if(rc EQUAL 0)
  message(FATAL_ERROR "${BIN}: the starter passes its tests; a starter must fail them:\n${all}")
endif()
if(NOT all MATCHES "not implemented yet: ")
  message(FATAL_ERROR "${BIN}: the starter fails without saying \"not implemented yet\":\n${all}")
endif()
if(all MATCHES "\\[       OK \\] ([A-Za-z0-9_./]+)")
  message(FATAL_ERROR "${BIN}: test ${CMAKE_MATCH_1} passes on the starter; every lab test must "
                      "exercise the student's code:\n${all}")
endif()
message(STATUS "${BIN}: every test fails with \"not implemented yet\"")
