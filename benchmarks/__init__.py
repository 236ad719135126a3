import os

# The tests' support modules (object stores, reference writers) that some benchmarks reuse: one place.
TEST_SUPPORT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "support")
