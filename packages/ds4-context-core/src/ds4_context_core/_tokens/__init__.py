"""Token estimation: the estimators and their calibration against provider-reported usage."""
