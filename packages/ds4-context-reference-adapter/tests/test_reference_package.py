from importlib.metadata import version

import ds4_context_reference_adapter


def test_version_matches_distribution_metadata():
    assert ds4_context_reference_adapter.__version__ == version("ds4-context-reference-adapter")
