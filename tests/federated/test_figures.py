"""Shared federated figures: the label histogram shows clients along x, classes along y, cluster boundaries."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from repro.federated.figures import label_histogram_figure


def test_label_histogram_figure_draws_the_transposed_histogram_and_boundaries():
    hist = np.arange(12).reshape(4, 3)  # 4 clients, 3 classes
    fig = label_histogram_figure(hist, "split", boundaries=[1, 3])
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), hist.T)
    assert [line.get_xdata()[0] for line in ax.lines] == [0.5, 2.5]
    assert ax.get_title() == "split" and ax.get_xlabel() == "client" and ax.get_ylabel() == "class"
    plt.close(fig)
