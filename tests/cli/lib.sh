# lib.sh — what the CLI test scripts share: source it, then check / expect, and end with finish.
pass=0
fail=0
check() { # name, condition (evaluated)
    if eval "$2"; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1"; fi
}
# A command must exit with code (never by a signal) and say something containing text.
expect() { # name, expected exit code, text the message must contain, command...
    local name="$1" code="$2" text="$3"
    shift 3
    local err rc
    err="$("$@" 2>&1 >/dev/null)"
    rc=$?
    check "$name (exit $rc, want $code; message: $err)" '[ "$rc" -eq "$code" ] && grep -qi -- "$text" <<<"$err"'
}
finish() { # the closing line CI reads, and the status
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
