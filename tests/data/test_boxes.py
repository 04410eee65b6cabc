"""The synthetic box data: box geometry as documented, the label shift inside the boxes only, the
counts, and seeded, split-independent draws."""
import numpy as np
import pytest

from jcaps.data import boxes

# The documented boxes at 100 x 100, restated here so the geometry is checked against the
# specification rather than against the module's own table: per layout, [(t0, t1, f0, f1), ...].
THREE = ((0, 30), (35, 65), (70, 100))
DOCUMENTED = {
    "earlier": [[(0, 30, 10, 90)]],
    "middle": [[(20, 80, 20, 80)]],
    "latter": [[(70, 100, 10, 90)]],
    "three_earlier": [[(0, 40, f0, f1) for f0, f1 in THREE]],
    "three_middle": [[(25, 65, f0, f1) for f0, f1 in THREE]],
    "mixed": [[(5, 65, 5, 65)], [(5, 65, 35, 95)], [(5, 65, 20, 80)],
              [(35, 95, 5, 65)], [(35, 95, 35, 95)], [(35, 95, 20, 80)], [(20, 80, 20, 80)]],
    "moving": [[(start, start + 60, 20, 80)] for start in (0, 10, 20, 30, 40)],
}


def documented_mask(layout, time_steps=100, num_features=100):
    mask = np.zeros((time_steps, num_features), dtype=bool)
    for t0, t1, f0, f1 in layout:
        mask[t0:t1, f0:f1] = True
    return mask


def test_names_and_default_counts():
    assert set(boxes.BOX_NAMES) == set(DOCUMENTED)
    for name in ("earlier", "middle", "latter", "three_earlier", "three_middle"):
        assert (boxes.default_num_examples(name, "train"), boxes.default_num_examples(name, "test")) == (1000, 300)
    assert (boxes.default_num_examples("mixed", "train"), boxes.default_num_examples("mixed", "test")) == (8000, 1000)
    assert (boxes.default_num_examples("moving", "train"), boxes.default_num_examples("moving", "test")) == (5000, 1000)


@pytest.mark.parametrize("name", boxes.BOX_NAMES)
def test_box_regions_at_full_size_are_the_documented_boxes(name):
    regions = boxes.box_regions(name)
    assert [[(t.start, t.stop, f.start, f.stop) for t, f in layout] for layout in regions] == DOCUMENTED[name]


def test_box_regions_scale_to_smaller_maps():
    assert boxes.box_regions("earlier", 20, 20) == [[(slice(0, 6), slice(2, 18))]]
    assert boxes.box_regions("three_middle", 20, 10) == [
        [(slice(5, 13), slice(0, 3)), (slice(5, 13), slice(4, 7)), (slice(5, 13), slice(7, 10))]]
    assert [layout[0][0] for layout in boxes.box_regions("moving", 20, 20)] == [
        slice(0, 12), slice(2, 14), slice(4, 16), slice(6, 18), slice(8, 20)]
    with pytest.raises(ValueError, match=r"a 2 x 2 map is too small for the 'three_earlier' boxes"):
        boxes.box_regions("three_earlier", 2, 2)


@pytest.mark.parametrize("name", boxes.BOX_NAMES)
def test_each_mask_is_its_examples_documented_box(name):
    data = boxes.generate_boxes(name, "train", seed=0, num_examples=21)
    assert data.series.shape == data.masks.shape == (21, 100, 100)
    assert (data.series.dtype, data.masks.dtype, data.labels.dtype, data.layouts.dtype) == (
        np.float32, bool, np.int32, np.int32)
    assert data.labels.shape == data.layouts.shape == (21,)
    for mask, layout in zip(data.masks, data.layouts):
        np.testing.assert_array_equal(mask, documented_mask(DOCUMENTED[name][layout]))


@pytest.mark.parametrize("name", boxes.BOX_NAMES)
def test_label_shifts_the_mean_inside_the_boxes_only(name):
    data = boxes.generate_boxes(name, "test", seed=1, num_examples=400, time_steps=20, num_features=20)
    positive = data.labels == 1
    inside_positive = data.series[positive][data.masks[positive]]
    inside_negative = data.series[~positive][data.masks[~positive]]
    outside = data.series[~data.masks]
    # Each group holds thousands of cells: the standard error of a mean is below 0.02.
    assert abs(inside_positive.mean() - 1) < 0.05
    assert abs(inside_negative.mean() + 1) < 0.05
    assert abs(outside.mean()) < 0.05
    assert abs(outside.std() - 1) < 0.05 and abs(inside_positive.std() - 1) < 0.05
    assert set(np.unique(data.labels)) == {0, 1}
    assert abs(positive.mean() - 0.5) < 0.1


def test_draws_are_seeded_and_splits_independent():
    def draw(split, seed):
        return boxes.generate_boxes("mixed", split, seed, num_examples=50, time_steps=20, num_features=20)

    first, again = draw("train", 3), draw("train", 3)
    for field in ("series", "labels", "masks", "layouts"):
        np.testing.assert_array_equal(getattr(first, field), getattr(again, field))
    for other in (draw("test", 3), draw("train", 4)):
        assert not np.allclose(first.series, other.series)
        assert not np.array_equal(first.labels, other.labels)


def test_mixed_draws_all_seven_layouts():
    data = boxes.generate_boxes("mixed", "train", seed=0, num_examples=700, time_steps=20, num_features=20)
    counts = np.bincount(data.layouts, minlength=7)
    assert len(counts) == 7 and counts.min() > 60  # about 100 each


def test_moving_shares_examples_equally_among_its_starts():
    data = boxes.generate_boxes("moving", "train", seed=0, num_examples=50, time_steps=20, num_features=20)
    np.testing.assert_array_equal(np.bincount(data.layouts), [10] * 5)
    assert len(set(data.layouts[:10].tolist())) > 1  # shuffled, not in blocks of one start
    first_times = np.argmax(data.masks.any(axis=2), axis=1)
    np.testing.assert_array_equal(first_times, 2 * data.layouts)  # starts 0, 10, ..., 40 scaled by 20 / 100


def test_unknown_name_split_or_count():
    with pytest.raises(ValueError, match=r"unknown box dataset 'late'; known: earlier, middle, latter, mixed"):
        boxes.generate_boxes("late", "train", 0)
    with pytest.raises(ValueError, match=r"unknown box dataset"):
        boxes.box_regions("late")
    with pytest.raises(ValueError, match=r"split must be one of train, test, not 'valid'"):
        boxes.generate_boxes("earlier", "valid", 0, num_examples=2)
    with pytest.raises(ValueError, match=r"num_examples must be positive, not 0"):
        boxes.generate_boxes("earlier", "train", 0, num_examples=0)
