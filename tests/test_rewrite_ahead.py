"""The test files' asserts rewritten ahead of the workers (tests/helpers/rewrite_ahead.py): what is written is what
pytest reads back for the file, with pytest's messages; a file changed since is rewritten by pytest again."""

from tests.helpers.rewrite_ahead import read_back, rewrite_ahead


def test_a_rewritten_file_is_read_back_by_pytest_with_its_assert_messages(tmp_path, pytestconfig):
    (tmp_path / "sub").mkdir()
    test_file = tmp_path / "sub" / "test_sample.py"
    test_file.write_text("def test_it():\n    a, b = 1, 2\n    assert a == b\n", encoding="utf-8")
    rewrite_ahead(pytestconfig, tmp_path)
    code = read_back(test_file)
    assert code is not None
    namespace: dict = {}
    exec(code, namespace)
    try:
        namespace["test_it"]()
    except AssertionError as error:
        assert "assert 1 == 2" in str(error)  # pytest's message, not a bare AssertionError
    else:
        raise AssertionError("the rewritten test passed")
    test_file.write_text("def test_it():\n    assert 1\n", encoding="utf-8")
    assert read_back(test_file) is None  # changed since: pytest rewrites it again
