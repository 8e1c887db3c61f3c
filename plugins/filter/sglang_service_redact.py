# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter sglang_service_redact: A server's text with its secrets masked."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_service_redact
short_description: A server's text with its secrets masked
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - What an SGLang server printed (its journal, an error message built from it) may hold any secret it was given.
    SGLang logs its C(server_args), the API key among them, and a model's code may print its environment.
  - Gives the text with each given secret that is set, and any Hugging Face token (C(hf_) and 30 or more letters and
    digits), replaced by C(********).
options:
  _input:
    description: The text.
    type: str
    required: true
  secrets:
    description: The secrets to mask (empty ones are skipped).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Fail with the journal, secrets masked
  ansible.builtin.fail:
    msg: "{{ journal.stdout | llmserve.sglang.sglang_service_redact([sglang_service_api_key, sglang_service_hf_token]) }}"
"""

RETURN = r"""
_value:
  description: The text, secrets masked.
  type: str
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.service.server_args import redact_text


def sglang_service_redact(text, secrets):
    """``text`` with each of ``secrets`` and any Hugging Face token masked."""
    return redact_text(plain(text), [plain(secret) for secret in secrets or []])


class FilterModule:
    def filters(self):
        return {"sglang_service_redact": sglang_service_redact}
