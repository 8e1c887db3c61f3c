# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What make galaxy-importer fails on, besides galaxy-importer's own failure: a WARNING or ERROR line in its log
(ansible-lint's findings, a missing changelog, ...), and, in its result, a plugin or module of a kind ansible-doc
documents that has no documentation or is listed twice (Galaxy lists plugins by file: a filter file returning a
filter of another name shows as a filter without docs).

    check_result.py LOG RESULT_JSON
"""
import collections
import json
import sys
from importlib.metadata import version

from galaxy_importer import constants


def main(log_path, result_path):
    problems = [line.rstrip() for line in open(log_path, encoding="utf-8")
                if line.startswith(("WARNING:", "ERROR:"))]
    result = json.load(open(result_path, encoding="utf-8"))
    contents = result["docs_blob"]["contents"]
    documented_kinds = set(constants.ANSIBLE_DOC_SUPPORTED_TYPES)
    listed = collections.Counter((item["content_type"], item["content_name"]) for item in contents)
    problems += ["listed %d times: %s %s" % (count, kind, name) for (kind, name), count in sorted(listed.items())
                 if count > 1]
    problems += ["no documentation: %s %s" % (item["content_type"], item["content_name"]) for item in contents
                 if item["content_type"] in documented_kinds and not item["doc_strings"]]
    for problem in problems:
        print("galaxy-importer: " + problem)
    if problems:
        return 1
    kinds = collections.Counter(kind for kind, dummy in listed if kind in documented_kinds)
    metadata = result["metadata"]
    print("galaxy-importer %s: %s.%s %s imported without warnings; documented, each once: %s" % (
        version("galaxy-importer"), metadata["namespace"], metadata["name"], metadata["version"],
        ", ".join("%d %s" % (count, kind) for kind, count in sorted(kinds.items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
