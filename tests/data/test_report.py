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


def test_image_statistics_are_printed_only_when_present():
    report = DataReport()
    report.add(40, 4)
    text_only = report.text("train")
    assert "image" not in text_only and "pixels" not in text_only
    report.add_images(1, 16, [3136], [3136])
    report.add(60, 4)
    report.add_images(2, 24, [1000, 50000], [1568, 12544])
    assert report.summary("train").endswith("rejected 0; 3 images, 40 image tokens")
    lines = report.text("train").splitlines()
    assert lines[2:6] == [
        "  images per example: min 1, mean 1.5, max 2",
        "  image tokens per example: min 16, mean 20.0, max 24",
        "  pixels per image before resizing: min 1,000, mean 18,045.3, max 50,000",
        "  pixels per image after resizing: min 1,568, mean 5,749.3, max 12,544",
    ]


def test_histograms_add_a_row_of_image_tokens(tmp_path):
    from honing.data.report_files import draw_histograms

    report = DataReport()
    report.add(40, 4)
    report.add_images(1, 16, [3136], [3136])
    path = draw_histograms({"train": report, "validation": DataReport()}, str(tmp_path / "report.png"))
    from PIL import Image

    assert Image.open(path).size == (600, 800)  # one column (splits with data), two rows
