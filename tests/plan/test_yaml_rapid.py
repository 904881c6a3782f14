"""rapidyaml reads a text only where it gives what PyYAML's safe loader gives; elsewhere it declines (None)."""

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karpy.controller.provisioning.scheduling import forked
from karpy.plan import yaml_rapid, yaml_reader

pytestmark = pytest.mark.skipif(not yaml_rapid.available(), reason="rapidyaml has no wheel for this platform")

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load_all(text):
    return list(yaml.load_all(text, Loader=SAFE_LOADER))


@pytest.mark.parametrize("text", [
    "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {app: web}}\nspec:\n  containers:\n  - name: app\n",
    "---\n---\nfoo: bar\n---\n",
    "a: 1\na: 2\nb: 3\n",                                              # a duplicate key: the last value, first place
    "ports: ['8080', \"true\", '1.5', 'null', '']\nn: [1, -2, 0.5, -1.5e+3, true, null, ~x]\n",
    "base: &b {cpu: 1}\nuses: [*b, *b]\n---\nagain: &b [x]\nhere: *b\n",   # each document's own anchor
    "s: |\n  kept\n  lines\nf: >-\n  folded\n  text\nq: \"\\x41\\u00e9\\t\"\np: plain\n  continued\n",
    "- a\n- [b, {c: d}]\n",                                               # a sequence as the document
    "k: v\r\nw: x\r\n",
    "args: [x = y, a=b, '= c']\nenv: A=1\n",                         # `=` within or beside other text
])
def test_reads_as_pyyaml_where_it_reads(text):
    assert yaml_rapid.read(text) == safe_load_all(text)


@pytest.mark.parametrize("text", [
    "a: yes\n",                 # plain: True to PyYAML, "yes" to rapidyaml
    "a: ~\n",
    "a: 0x1f\n",
    "a: 1:30\n",
    "a: .inf\n",
    "a: inf\n",                  # rapidyaml writes ".inf"
    "a: 1e3\n",                  # a number to rapidyaml, a string to PyYAML
    "a: 2002-12-14\n",           # a date
    "1: int key\n",              # every key is written quoted
    "a: !!str 1\n",              # a tag
    "base: &b {x: 1}\nm:\n  <<: *b\n",                                   # a merge key
    "%YAML 1.1\n---\na: 1\n",   # a directive
    "a: &x 1\n---\nb: *x\n",    # an alias to another document's anchor: PyYAML refuses it
    "a: -.5\n",                 # a string to PyYAML, written -0.5 by rapidyaml
    "a: |\n  x",                # a block scalar ending the text: PyYAML gives "x", rapidyaml "x\n"
    "a: b\u2028c\n",             # a line break to PyYAML only
    "a: 1\n...\n  b: 2\n",      # past a document end marker rapidyaml reads on, PyYAML finds an error
    "a:\t1\n",
    "x: &a [1]\n? *a\n: y\n",     # an explicit key
    "a: [1, 2\n",               # invalid YAML: PyYAML's error names its line
    "? [a, b]\n: c\n",
    "a: =\na: 1\n",             # a plain `=`: PyYAML cannot build it, even where a later duplicate key discards it
    "a: [1, = ]\n",
])
def test_declines_where_pyyaml_may_read_otherwise(text):
    assert yaml_rapid.read(text) is None


SPELLINGS = ["yes", "No", "on", "OFF", "true", "False", "null", "Null", "~", "", "0", "-0", "012", "0o17", "0x1f",
             "1_000", "1:30", "1.5", ".5", "1.", "1e3", "1.5e+3", ".inf", "-.Inf", ".nan", "inf", "nan", "2002-12-14",
             "=", "<<", "y", "n", "+1", "app", "8080", "100m", "1Gi", "a b", "é", "-", "'", "#x"]
scalars = st.one_of(st.sampled_from(SPELLINGS), st.text(max_size=6), st.integers(), st.booleans(), st.none(),
                    st.floats(allow_nan=False, allow_infinity=False))
trees = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(st.sampled_from(SPELLINGS), st.text(max_size=6)), inner,
                                                 max_size=4)), max_leaves=20)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(trees, min_size=1, max_size=3), flow=st.sampled_from([None, False, True]), shared=st.booleans())
def test_any_text_pyyaml_writes_is_read_as_pyyaml_reads_it_or_declined(docs, flow, shared):
    if shared:                                   # the same object twice: PyYAML writes an anchor and an alias
        docs = [[doc, doc] for doc in docs]
    text = yaml.safe_dump_all(docs, default_flow_style=flow, allow_unicode=True)
    read = yaml_rapid.read(text)
    assert read is None or read == safe_load_all(text)


def test_a_read_in_a_process_of_its_own_comes_back_marshalled():
    text = "a: [1, {b: c}]\n---\nd: 2\n"
    import marshal
    assert marshal.loads(forked.start(lambda: yaml_rapid.read_to_send(text), fork=True,
                                      only_forked=True).result()) == safe_load_all(text)


def test_an_alias_bomb_runs_out_of_the_memory_its_process_is_given():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]   # 10**9 leaves if copied
    text = "\n".join(lines) + "\n"

    try:
        sent = forked.start(lambda: yaml_rapid.read_to_send(text), fork=True, only_forked=True).result()
    except forked.ForkFailed:                    # out of memory in Python rather than in rapidyaml
        sent = None
    assert sent is None
    assert yaml_reader.load_all(text) == safe_load_all(text)                # PyYAML reads it, sharing the aliases


def test_a_long_text_is_read_by_rapidyaml_in_a_process_per_part_and_by_pyyaml_where_it_declines_one(monkeypatch):
    started = []
    start = forked._start

    def counted(*args):
        started.append(args)
        return start(*args)

    monkeypatch.setattr(forked, "_start", counted)
    monkeypatch.setattr(yaml_reader, "PARALLEL_CHARS", 10)
    parts = min(forked.cores(), yaml_reader.MAX_PARTS)
    many = "".join(f"---\nkind: Pod\nmetadata: {{name: p{i}}}\nspec: {{n: {i}}}\n" for i in range(40))
    assert yaml_reader.load_all(many) == safe_load_all(many)
    assert len(started) == parts

    started.clear()
    dated = many + "---\ncreated: 2024-01-02\n"                          # a date in the last part: rapidyaml declines it
    assert yaml_reader.load_all(dated) == safe_load_all(dated)
    assert len(started) == parts + parts - 1                              # then PyYAML reads it in parts, whole

    started.clear()
    with monkeypatch.context() as m:
        m.setattr(forked, "cores", lambda: 3)
        anchored = "---\na: &x [1, 2]\nb: *x\n" + many + "---\nc: &y {k: v}\nd: [*y, *y]\n"
        assert yaml_reader.load_all(anchored) == safe_load_all(anchored)   # anchors in the first part and the last
        assert len(started) == 3


def test_an_error_in_a_long_text_names_its_line_as_pyyaml_does(monkeypatch):
    monkeypatch.setattr(yaml_reader, "PARALLEL_CHARS", 10)
    text = "".join(f"---\nkind: Pod\nmetadata: {{name: p{i}}}\n" for i in range(40)) + "---\na: [1, 2\n"
    with pytest.raises(yaml.YAMLError) as safe:
        safe_load_all(text)
    with pytest.raises(yaml.YAMLError) as read:
        yaml_reader.load_all(text)
    assert str(read.value) == str(safe.value)
