"""The check engine, one import for the checks of every notebook.

Split by concern:
- ``feedback``: the failure block, the hint ladder (what and where, then the mistake's
  name, then code), exercises and ``require``;
- ``values``: describing, normalising, validating and comparing a student's values;
- ``running``: calling a student's code under a time limit, and the case-by-case engine;
- ``predictions``: predict, observe, explain (the first committed answer is kept);
- ``gradients``: the numeric gradient check;
- ``references``: the independent implementations several checks compare with.
"""

# The names below are imported to be re-exported (ruff: F401 is off for this file).
from .feedback import (
    CODE_AFTER,
    CheckError,
    ExerciseNotSolved,
    Mistake,
    current_exercise,
    exercise,
    hint,
    passed,
    require,
    reset_feedback,
    show_traceback,
)
from .gradients import check_gradients
from .predictions import COMMITTED, check_prediction, read_prediction
from .running import (
    TIME_LIMIT,
    TimedOut,
    expect_function,
    explain_error,
    run_cases,
    run_student,
    stopped_after,
    time_limit,
)
from .values import (
    as_mistakes,
    as_number,
    compare,
    describe,
    expect_count,
    expect_tensor,
    first_mistake,
    fmt,
    fmt_apart,
    matches,
    mistake_error,
    plain,
    plain_tensor,
    rel_error,
)

__all__ = ["CheckError", "require", "show_traceback", "check_gradients", "hint"]
