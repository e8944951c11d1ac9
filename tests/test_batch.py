import pytest

from dsx.schema.batch import BatchError, solve_batch


def test_micro_and_accum_give_train_batch():
    sizes = solve_batch(8, micro=4, accum=2)
    assert (sizes.train_batch_size, sizes.train_micro_batch_size_per_gpu, sizes.gradient_accumulation_steps) == (64, 4, 2)


def test_train_and_micro_give_accum():
    assert solve_batch(4, train=64, micro=8).gradient_accumulation_steps == 2


def test_train_and_accum_give_micro():
    assert solve_batch(4, train=64, accum=4).train_micro_batch_size_per_gpu == 4


def test_micro_alone_means_no_accumulation():
    sizes = solve_batch(2, micro=3)
    assert (sizes.train_batch_size, sizes.gradient_accumulation_steps) == (6, 1)


def test_nothing_given_means_micro_batch_one():
    assert solve_batch(1).train_micro_batch_size_per_gpu == 1


def test_all_three_must_agree_with_world_size():
    with pytest.raises(BatchError, match=r"^train batch 64 != micro-batch 4 x gradient accumulation 2 x world size 4 = 32$"):
        solve_batch(4, train=64, micro=4, accum=2)


def test_train_batch_must_divide():
    with pytest.raises(BatchError, match=r"^train batch 10 is not divisible by micro-batch 4 x world size 1 = 4$"):
        solve_batch(1, train=10, micro=4)


def test_accumulation_alone_is_not_enough():
    with pytest.raises(BatchError, match="gradient accumulation alone does not fix the batch"):
        solve_batch(1, accum=4)


def test_sizes_must_be_positive():
    with pytest.raises(BatchError, match="^micro-batch must be at least 1, got 0$"):
        solve_batch(1, micro=0)


def test_batch_sizes_model_checks_values_given_directly():
    from pydantic import ValidationError

    from dsx.schema.batch import BatchSizes

    with pytest.raises(ValidationError):
        BatchSizes(train_batch_size=0, train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1, world_size=1)
