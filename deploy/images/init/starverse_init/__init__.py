"""The platform's init for instance images: PID 1's child under tini. It installs the access
Secret's keys and follows changes to them, keeps sshd's host key on the instance disk, runs sshd
(keys only) and JupyterLab (when the image has it), writes the platform's environment and a
message of the day, and on SIGTERM runs the user's on-stop hooks before it stops everything.

Pure standard library, Python 3.8 or later: it runs on whatever python3 an image has. Every
path is read from the environment and taken inside STARVERSE_ROOT, so the tests run it in a
scratch directory (docs/images.md has the contract)."""

__version__ = "1"
