"""
The exposition's format layer: each family is one block (HELP, TYPE, its
samples), whatever order the samples were produced in.
"""

from prometheus_client.parser import text_string_to_metric_families

from kafkatwist.metrics.stats import _Writer


def test_families_are_contiguous_when_samples_interleave():
    w = _Writer()
    w.declare("a_total", "counter", "A.")
    w.declare("h_seconds", "histogram", "H.")
    w.declare("g", "gauge", "G with a \\ backslash\nand a newline.")
    for key in ("x", "y"):
        w.sample("a_total", 1, k=key)
        w.sample("h_seconds_bucket", 1, k=key, le="+Inf")
        w.sample("h_seconds_sum", 0.5, k=key)
        w.sample("h_seconds_count", 1, k=key)
        w.sample("g", 2, k=f'quote " {key}')
    text = w.text()
    names = [line.split("{")[0] for line in text.splitlines() if not line.startswith("#")]
    assert names == ["a_total"] * 2 + ["h_seconds_bucket", "h_seconds_sum", "h_seconds_count"] * 2 + ["g"] * 2
    families = {f.name: f for f in text_string_to_metric_families(text)}
    # prometheus_client names a counter family without its _total.
    assert families["a"].type == "counter"
    assert families["h_seconds"].type == "histogram"
    assert families["g"].type == "gauge"
    assert families["g"].documentation == "G with a \\ backslash\nand a newline."
    assert {s.labels["k"] for s in families["g"].samples} == {'quote " x', 'quote " y'}
    assert len(families["h_seconds"].samples) == 6


def test_declared_family_without_samples_still_has_its_type():
    w = _Writer()
    w.declare("empty", "gauge", "Nothing yet.")
    assert w.text() == "# HELP empty Nothing yet.\n# TYPE empty gauge\n"


def test_undeclared_sample_is_a_bug():
    w = _Writer()
    try:
        w.sample("nobody", 1)
    except KeyError:
        pass
    else:
        raise AssertionError("an undeclared sample was accepted")
