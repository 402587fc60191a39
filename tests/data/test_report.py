from honing.data.report import DataReport


def test_counts_histogram_and_text():
    report = DataReport()
    for length, loss in [(48, 6), (49, 6), (50, 5), (58, 7), (58, 7), (100, 9)]:
        report.add(length, loss)
    report.reject("data.jsonl:3: no tokens to train on")
    report.truncated, report.rows, report.row_length, report.packing_efficiency = 1, 1, 512, 363 / 512
    assert (report.examples, report.tokens, report.loss_tokens, report.rejected) == (6, 363, 40, 1)
    # 48..100 is 53 lengths: 9 bins of 6 tokens, the last one cut at the maximum
    assert report.length_histogram()[:2] == [(48, 53, 3), (54, 59, 2)]
    assert report.length_histogram()[-1] == (96, 100, 1) and len(report.length_histogram()) == 9
    text = report.text("train")
    assert text.splitlines()[0] == (
        "train data: 6 examples, 363 tokens (11% with loss); truncated 1, dropped 0 over-long, rejected 1"
    )
    assert "  data.jsonl:3: no tokens to train on" in text
    assert "rows: 1 of 512 tokens, packing efficiency 70.9%" in text
    assert "lengths: min 48, median 54, mean 60.5, max 100 tokens" in text


def test_one_bin_per_length_when_lengths_are_few():
    report = DataReport()
    for length in [3, 3, 4, 6]:
        report.add(length, length)
    assert report.length_histogram() == [(3, 3, 2), (4, 4, 1), (5, 5, 0), (6, 6, 1)]
