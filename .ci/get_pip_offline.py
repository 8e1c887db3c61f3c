# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for the get-pip.py that ansible-test downloads from ci-files.testing.ansible.com.

That host is not reachable here. ansible-test runs this file with pip's arguments to bootstrap a
fresh venv; we bootstrap pip with ensurepip and hand the remaining arguments to the real pip.
"""
import subprocess
import sys

DROPPED = {"--no-setuptools", "--no-wheel"}

subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"], stdout=subprocess.DEVNULL)
args = [a for a in sys.argv[1:] if a not in DROPPED]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check"] + args)
