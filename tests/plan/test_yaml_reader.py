"""karpy plan's YAML reader gives what PyYAML's safe loader gives, for every kind of document."""

import pytest
import yaml

from karpy.plan import yaml_reader

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)     # what the reader builds on


def safe_load_all(text):
    return list(yaml.load_all(text, Loader=SAFE_LOADER))

DOCUMENTS = {
    "manifests": """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default, labels: {app: web}}
spec:
  containers:
  - name: app
    resources: {requests: {cpu: 100m, memory: 1Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
""",
    "implicit types": """
int: 42
octal: 0o17
hex: 0x1f
sexagesimal: 1:30
float: 1.5e3
infinity: .inf
bools: [true, False, yes, off, on, no]
nulls: [null, ~, ]
quoted: ["42", 'true', "null"]
explicit: !!str 12
explicit-int: !!int "7"
1: int key
null: null key
true: bool key
""",
    "anchors and aliases": """
base: &base {cpu: 1, memory: 2Gi}
list: &list [a, b]
uses: [*base, *list, *base]
scalar: &s hello
again: *s
""",
    "merge keys": """
base: &base {cpu: 1, memory: 2Gi}
merged:
  <<: *base
  memory: 4Gi
""",
    "timestamps and binary": """
when: 2001-12-14t21:59:43.10-05:00
day: 2002-12-14
data: !!binary aGVsbG8=
""",
    "sets and ordered maps": """
set: !!set {a, b}
pairs: !!omap [{a: 1}, {b: 2}]
""",
    "empty documents": "---\n---\nfoo: bar\n---\n",
    "duplicate keys": "a: 1\na: 2\n",
}


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_reads_as_safe_load_all_reads(name):
    text = DOCUMENTS[name]
    assert yaml_reader.load_all(text) == safe_load_all(text)


def test_aliases_share_one_object_as_pyyaml_shares_them():
    doc, = yaml_reader.load_all("base: &base {cpu: 1}\nuses: [*base, *base]\n")
    assert doc["uses"][0] is doc["base"] and doc["uses"][1] is doc["base"]


def test_a_recursive_alias_is_built_by_pyyaml():
    doc, = yaml_reader.load_all("a: &a [1, *a]\n")
    assert doc["a"][1] is doc["a"]


def test_an_alias_bomb_is_built_once_per_node():
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]     # 10**9 leaves if copied
    doc, = yaml_reader.load_all("\n".join(lines) + "\n")
    assert doc["a8"][0] is doc["a7"] and doc["a8"][9] is doc["a7"]


@pytest.mark.parametrize("text", [
    "a: [1, 2\n",                         # unclosed flow sequence
    "? [a, b]\n: list as key\n",          # unhashable key
    "a: !unknown 1\n",                    # a tag safe loading refuses
])
def test_errors_are_pyyamls(text):
    with pytest.raises(yaml.YAMLError) as safe:
        safe_load_all(text)
    with pytest.raises(yaml.YAMLError) as fast:
        yaml_reader.load_all(text)
    assert type(fast.value) is type(safe.value) and str(fast.value) == str(safe.value)


MANY = "".join(f"---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p{i}, labels: &l{i} {{app: a{i % 3}}}}}\n"
               f"spec: {{x: *l{i}, n: {i}}}\n" for i in range(40))


def test_a_text_is_cut_into_parts_where_documents_start():
    pieces = yaml_reader.split_documents(MANY, 3)
    assert len(pieces) == 3 and "".join(pieces) == MANY
    assert all(piece.startswith("---\n") for piece in pieces)
    assert max(map(len, pieces)) < len(MANY) // 2
    assert yaml_reader.split_documents("%YAML 1.1\n" + MANY, 3) == ["%YAML 1.1\n" + MANY]   # a directive: whole
    assert yaml_reader.split_documents("a: 1\nb: ---\n", 2) == ["a: 1\nb: ---\n"]           # no document start


@pytest.mark.parametrize("parts", [2, 3])
def test_parts_read_in_processes_of_their_own_give_what_the_whole_gives(parts):
    loaded = yaml_reader.load_all(MANY, parts=parts)
    assert loaded == safe_load_all(MANY)
    assert loaded[39]["spec"]["x"] is loaded[39]["metadata"]["labels"]     # aliases still share one object


def test_an_error_in_a_later_part_names_its_line_in_the_whole_text():
    text = MANY + "---\na: [1, 2\n"
    with pytest.raises(yaml.YAMLError) as safe:
        safe_load_all(text)
    with pytest.raises(yaml.YAMLError) as parts:
        yaml_reader.load_all(text, parts=2)
    assert str(parts.value) == str(safe.value) and "line 203" in str(parts.value)


def test_a_cut_at_a_document_start_ends_no_document_early():
    text = MANY + "a: |\n  kept\n---\n  next\n" + MANY     # the `---` line ends the block scalar before it
    pieces = yaml_reader.split_documents(text, 2)
    assert pieces[1].startswith("---\n  next\n")
    assert yaml_reader.load_all(text, parts=2) == safe_load_all(text)


def test_a_first_share_cuts_the_first_part_shorter_and_the_others_evenly():
    pieces = yaml_reader.split_documents(MANY, 3, first=0.2)
    assert "".join(pieces) == MANY and len(pieces) == 3
    assert len(pieces[0]) < len(pieces[1]) and abs(len(pieces[1]) - len(pieces[2])) < len(MANY) // 10


def test_later_parts_are_read_in_processes_started_before_the_documents_are_asked_for(monkeypatch):
    from karpy.controller.provisioning.scheduling import forked

    processes = []
    start = forked._start

    def started(*args):
        process, receiving = start(*args)
        processes.append(process)
        return process, receiving

    monkeypatch.setattr(forked, "_start", started)
    loading = yaml_reader.start_loading(MANY, parts=3)
    assert len(processes) == 2                                         # the first part is read here, when asked
    assert loading.result() == safe_load_all(MANY)
    assert not any(process.is_alive() for process in processes)       # every process ended


@pytest.mark.parametrize("late", [
    pytest.param("---\ncreated: 2024-01-02\n", id="a timestamp (not marshallable)"),
    pytest.param("---\nself: &s [1, *s]\n", id="a recursive list"),
])
def test_a_later_part_of_any_plain_or_other_objects_comes_back_as_it_was_read(late):
    text = MANY + late
    loaded = yaml_reader.load_all(text, parts=2)
    assert loaded[:-1] == safe_load_all(text)[:-1]
    last, = safe_load_all(late)
    assert type(loaded[-1][next(iter(last))]) is type(last[next(iter(last))])


def test_an_error_in_the_first_part_names_its_line_as_the_whole_text_does():
    text = "a: [1, 2\n" + MANY
    with pytest.raises(yaml.YAMLError) as safe:
        safe_load_all(text)
    with pytest.raises(yaml.YAMLError) as parts:
        yaml_reader.load_all(text, parts=2)
    assert str(parts.value) == str(safe.value)
