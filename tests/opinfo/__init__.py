"""The OpInfo sweep: every operator in torch's ``op_db`` through ``aot_function``, against eager.

``sweep.py`` holds the engine and the command line (``python -m tests.opinfo.sweep --help``);
``test_opinfo.py`` holds the pytest entry points; ``expected_failures.json`` lists each
(op variant, dtype) that does not pass with aotgrad yet.
"""
