from importlib.metadata import version

import ds4_context_engine


def test_version_matches_distribution_metadata():
    assert ds4_context_engine.__version__ == version("ds4-context-engine")
