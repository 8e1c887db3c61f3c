# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Sphinx configuration of the collection's docs site (`make docs`): antsibull-docs' configuration for a collection
(`antsibull-docs sphinx-init`), with the pages of docs/ in Markdown (MyST) beside the plugin and role docs.

The build runs offline: intersphinx reads no inventory from the network, only ansible_devel.inv, which `make docs`
writes from ansible-devel-refs.txt (the few labels of Ansible's own docs that antsibull-docs' pages refer to, with
their pages on docs.ansible.com). Warnings are errors (`sphinx-build -W`): a reference missing there fails the
build."""

project = "llmserve.sglang"
copyright = "llmserve.sglang contributors"  # pylint: disable=redefined-builtin
title = "llmserve.sglang"
html_short_title = "llmserve.sglang"

extensions = ["sphinx.ext.intersphinx", "sphinx_antsibull_ext", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}

pygments_style = "ansible"
highlight_language = "YAML+Jinja"

html_theme = "sphinx_ansible_theme"
html_show_sphinx = False
display_version = False
html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False

# Offline (see above): the inventory is a file of the source directory, the links go to docs.ansible.com.
intersphinx_mapping = {"ansible_devel": ("https://docs.ansible.com/projects/ansible/devel/", "ansible_devel.inv")}

default_role = "any"
nitpicky = True

# MyST: headings get anchors, so that a page's links to another page's section resolve.
myst_heading_anchors = 3
