"""The table-row helpers of foreign schemas' key tables."""

from honing.interop.configs.schema_table import honoured, honoured_in


def test_honoured_in_names_each_key_under_the_section_in_order():
    rows = honoured_in("dpo", "beta", "ld_alpha")
    assert rows == {**honoured("dpo.beta", "beta"), **honoured("dpo.ld_alpha", "ld_alpha")}
    assert list(rows) == ["beta", "ld_alpha"]  # a table's order is the order its keys are walked and reported
