"""The charts' shared look: readable in the light and the dark theme (``?__theme=dark``) and on a page
800 px wide. The figures have transparent backgrounds, so the page's own shows through, and the page's
style sheet (:mod:`app.page.page_js`) gives their text the page's text colour.

Source: docs/design.md §1 (the app).
"""
from __future__ import annotations

import plotly.graph_objects as go

GRID = "rgba(128, 128, 128, 0.3)"
"""Grid and zero lines of the charts: grey, visible on a light and on a dark page."""
TITLE_PX = 14
"""Chart title size (px): a title fits a chart half of an 800 px wide page."""


def themed(fig: go.Figure, title: str, height: int = 320) -> go.Figure:
    """Give ``fig`` the charts' shared look: transparent backgrounds and grey grid lines, readable in the light
    and the dark theme (``app.page.page_js`` gives the text the page's colour); the title at the top left (the
    chart's block shows no label over it); the legend under the x-axis title, in rows that wrap on a narrow page.

    Args:
        fig: the figure; changed in place.
        title: its title (one line, short enough for half of an 800 px page).
        height: its height in pixels.

    Returns:
        ``fig``.

    Source: docs/design.md §1 (the app).
    """
    fig.update_layout(title=dict(text=title, x=0.01, xanchor="left", y=0.98, yanchor="top", font_size=TITLE_PX),
                      height=height, margin=dict(l=44, r=16, t=36, b=16), paper_bgcolor="rgba(0,0,0,0)",
                      plot_bgcolor="rgba(0,0,0,0)", legend=dict(orientation="h", x=0, xanchor="left", y=-0.32,
                                                                  yanchor="top", bgcolor="rgba(0,0,0,0)",
                                                                  traceorder="normal"))
    for axes in (fig.update_xaxes, fig.update_yaxes):
        axes(gridcolor=GRID, zerolinecolor=GRID, automargin=True)
    return fig
