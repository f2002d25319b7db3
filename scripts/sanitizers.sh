# The sanitizers' run-time options, in one place, for every run of an instrumented build
# (scripts/test's sanitize tier, scripts/sanitize, scripts/fuzz): a report fails the process that
# made it, so its test fails and prints it. Sourced.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# die_after_fork=0: the tests fork children that start threads (a store server, a watch).
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0
