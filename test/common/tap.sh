# TAP-style results for the shell test suites: one "ok N - ..." or "not ok N - ..."
# line per check, and a last line "SUITE: P passed, F failed" that scripts/test
# counts. Source it after cd'ing to the repository root.
# shellcheck shell=bash

passed=0
failed=0
n=0

# report OK DESCRIPTION [DIAGNOSTIC]: OK is 0 for a pass; DIAGNOSTIC is shown
# under a failure.
report() {
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then
        passed=$((passed + 1))
        echo "ok $n - $2"
    else
        failed=$((failed + 1))
        echo "not ok $n - $2"
        [ -n "${3:-}" ] && printf '%s\n' "$3" | sed 's/^/#   /'
    fi
    return 0
}

# report_summary SUITE: prints the last line; fails if any check failed.
report_summary() {
    echo "$1: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
