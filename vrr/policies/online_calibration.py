"""Calibration where the loop runs, public: the online controller's parameters from a small labeled set (Sec.
4.2-4.3; App. A "Calibration Estimators"; Algorithm 1 line 1) and the JSON file that stores them.

The fit is ``vrr.policies.online._calibrate`` (:func:`calibrate_labeled`, :func:`calibrate_unlabeled`,
:class:`CalibrationReport`), the file ``vrr.policies.online._calibration_file``. ``python -m
vrr.policies.online_calibration examples/calibration_small.json`` writes the shipped example
(:func:`write_small_example`).
"""
from .online._calibrate import (  # noqa: F401
    CalibrationReport,
    CalibrationWarning,
    calibrate_labeled,
    calibrate_unlabeled,
)
from .online._calibration_file import (  # noqa: F401
    EXAMPLE,
    FORMAT,
    FORMAT_VERSION,
    example_labeled_set,
    is_online_calibration,
    load_online_calibration,
    main,
    read_online_calibration,
    save_online_calibration,
    write_small_example,
)

# the public names are shown, pickled and documented as this module's, wherever their code lives
for _name in ("CalibrationReport", "CalibrationWarning", "calibrate_labeled", "calibrate_unlabeled",
              "example_labeled_set", "is_online_calibration", "load_online_calibration", "main",
              "read_online_calibration", "save_online_calibration", "write_small_example"):
    globals()[_name].__module__ = __name__
del _name

if __name__ == "__main__":
    raise SystemExit(main())
