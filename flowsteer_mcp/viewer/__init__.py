"""The read-only web viewer: the live canvas and the episode browser.

Why a package of its own: viewing must never change a workflow, so it depends on the canvas core and the
store only, never on the MCP tool layer or on `training`. The graph is drawn as SVG in Python
(`graph_svg`), so pages need no JavaScript library and no CDN.
"""
