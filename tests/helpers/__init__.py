"""What the tests share: clusters and jobs on them, an S3 server, the core simulation harness,
namespace hosts. Imported as `tests.helpers.NAME` (pytest puts the repository root on
sys.path: `pythonpath` in pyproject.toml)."""
