"""Real browser (Debian ``chromium`` via the ``playwright`` package): the Inspect tab's draft tree keeps one
font size at every depth (Gradio's page style shrinks each nested list to 90%, so depth 8 would be 43%)."""
from __future__ import annotations

from helpers.browser import chromium, served_page
from helpers.fakes import free_port

from app.views.inspect_view import tree_html
from specvlm.analysis.records import StepTree, TreeNodeView

DEPTH = 8


def _chain(depth: int) -> StepTree:
    nodes = [TreeNodeView(index=i, parent=i - 1, depth=i + 1, token=i, text=f"w{i}", draft_prob=0.5,
                          path_prob=0.5 ** (i + 1), accepted=i < 3, diverged=i == 3,
                          target_token=99 if i == 3 else None, target_text="t" if i == 3 else None)
             for i in range(depth)]
    return StepTree(step=1, root_token=7, root_text="r", nodes=nodes, accepted_path=[0, 1, 2], target_token=99,
                    target_text="t", diverged_at=2, accept_length=3)


def test_tree_nodes_keep_their_size_at_depth():
    exe = chromium()
    import gradio as gr
    with gr.Blocks() as demo:
        gr.HTML(tree_html(_chain(DEPTH)), elem_id="tree")
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    with served_page(demo, port, exe, viewport=(1200, 900)) as page:
        page.locator("#tree .tree-node").first.wait_for(timeout=60_000)
        sizes = page.evaluate("() => Array.from(document.querySelectorAll('#tree .tree-node'))"
                              ".map(e => parseFloat(getComputedStyle(e).fontSize))")
    assert len(sizes) == DEPTH
    assert max(sizes) - min(sizes) < 0.01, sizes      # the same size at depth 1 and depth 8
    assert min(sizes) >= 12, sizes                    # and readable
