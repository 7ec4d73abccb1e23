"""Test helper: cut a column of done flags into its episode pieces (not a test module)."""


def episode_pieces(done_column):
    """``[(start, end), ...]`` inclusive step ranges of one column, cut after each done."""
    pieces, start = [], 0
    for t, d in enumerate(done_column):
        if d or t == len(done_column) - 1:
            pieces.append((start, t))
            start = t + 1
    return pieces
