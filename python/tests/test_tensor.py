"""Tensor, dtypes, NumPy, indexing, errors (cleave's Python package)."""
import unittest

import numpy as np

import cleave as ms
from cleave import ops


class TensorTest(unittest.TestCase):
    def test_numpy_round_trip_keeps_values_shape_and_dtype(self):
        for dtype, ms_dtype in [(np.float32, ms.float32), (np.float64, ms.float64),
                                (np.int32, ms.int32), (np.int64, ms.int64), (np.bool_, ms.bool_)]:
            a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
            t = ms.Tensor(a)
            self.assertEqual(t.dtype, ms_dtype)
            self.assertEqual(t.shape, (3, 4))
            np.testing.assert_array_equal(t.asnumpy(), a)
            self.assertEqual(t.asnumpy().dtype, a.dtype)

    def test_asnumpy_shares_the_tensors_memory_and_keeps_it_alive(self):
        t = ms.Tensor(np.zeros((4,), np.float32))
        a, b = t.asnumpy(), t.asnumpy()
        self.assertTrue(np.shares_memory(a, b))
        a[1] = 5.0
        self.assertEqual(float(t[1]), 5.0)
        del t
        self.assertEqual(b[1], 5.0)  # the array still holds the storage

    def test_python_values_become_tensors_as_in_mindspore(self):
        self.assertEqual(ms.Tensor([1.0, 2.0]).dtype, ms.float32)
        self.assertEqual(ms.Tensor([1, 2]).dtype, ms.int64)
        self.assertEqual(ms.Tensor(3.5).shape, ())
        self.assertEqual(ms.Tensor([1, 2], dtype=ms.float32).dtype, ms.float32)

    def test_unsupported_numpy_dtypes_are_type_errors_naming_them(self):
        with self.assertRaisesRegex(TypeError, "uint8 is not supported"):
            ms.Tensor(np.zeros(3, np.uint8))
        with self.assertRaisesRegex(TypeError, "cannot become a Tensor"):
            ms.Tensor(object())

    def test_arithmetic_matches_numpy(self):
        a = np.random.RandomState(0).rand(3, 4).astype(np.float32)
        b = np.random.RandomState(1).rand(3, 4).astype(np.float32) + 0.5
        x, y = ms.Tensor(a), ms.Tensor(b)
        np.testing.assert_allclose((x + y).asnumpy(), a + b, rtol=1e-6)
        np.testing.assert_allclose((x - 2).asnumpy(), a - 2, rtol=1e-6)
        np.testing.assert_allclose((2 - x).asnumpy(), 2 - a, rtol=1e-6)
        np.testing.assert_allclose((x * y / 4).asnumpy(), a * b / 4, rtol=1e-6)
        np.testing.assert_allclose((1 / y).asnumpy(), 1 / b, rtol=1e-6)
        np.testing.assert_allclose((x @ y.transpose(1, 0)).asnumpy(), a @ b.T, rtol=1e-5)
        np.testing.assert_array_equal((x > 0.5).asnumpy(), a > 0.5)
        np.testing.assert_allclose(x.sum(axis=1).asnumpy(), a.sum(axis=1), rtol=1e-6)

    def test_indexing_matches_numpy(self):
        a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
        t = ms.Tensor(a)
        for key in [np.s_[1:3], np.s_[:, 1], np.s_[-1], np.s_[::2], np.s_[..., 1:4:2],
                    np.s_[2, 1:, ::-1], np.s_[0:0]]:
            np.testing.assert_array_equal(t[key].asnumpy(), a[key], err_msg=str(key))
        with self.assertRaisesRegex(IndexError, "out of range"):
            t[3]
        with self.assertRaisesRegex(IndexError, "too many indices"):
            t[0, 0, 0, 0]

    def test_truth_value_of_a_tensor(self):
        self.assertTrue(bool(ms.Tensor([1.0])))
        with self.assertRaisesRegex(ValueError, "ambiguous"):
            bool(ms.Tensor([1.0, 2.0]))

    def test_functional_ops_and_primitives(self):
        a = np.random.RandomState(2).rand(4, 3).astype(np.float32) - 0.5
        x = ms.Tensor(a)
        np.testing.assert_allclose(ops.relu(x).asnumpy(), np.maximum(a, 0))
        np.testing.assert_allclose(ops.ReLU()(x).asnumpy(), np.maximum(a, 0))
        np.testing.assert_allclose(ops.MatMul(transpose_b=True)(x, x).asnumpy(), a @ a.T,
                                   rtol=1e-5)
        np.testing.assert_allclose(ops.reshape(x, (3, 4)).asnumpy(), a.reshape(3, 4))
        halves = ops.split(ops.reshape(x, (2, 6)), axis=1, output_num=2)
        np.testing.assert_allclose(halves[1].asnumpy(), a.reshape(2, 6)[:, 3:])
        parts = ops.split(x, axis=0, size_splits=[1, 3])
        self.assertEqual([p.shape for p in parts], [(1, 3), (3, 3)])
        np.testing.assert_allclose(parts[1].asnumpy(), a[1:])
        # AllReduce alone: the group of one rank.
        np.testing.assert_allclose(ops.AllReduce()(x).asnumpy(), a)
        with self.assertRaisesRegex(TypeError, "unexpected keyword argument 'transpose_c'"):
            ops.MatMul(transpose_c=True)
        with self.assertRaisesRegex(ValueError, "not a reduction"):
            ops.AllReduce(op="median")(x)

    def test_cleave_errors_arrive_as_value_errors_with_cleaves_message(self):
        x = ms.Tensor(np.zeros((2, 3), np.float32))
        with self.assertRaisesRegex(ValueError, "MatMul"):
            ops.matmul(x, x)

    def test_the_package_says_its_version(self):
        self.assertRegex(ms.__version__, r"^\d+\.\d+\.\d+$")

    def test_set_seed_seeds_numpy_too(self):
        ms.set_seed(7)
        a = np.random.rand(3)
        ms.set_seed(7)
        np.testing.assert_array_equal(np.random.rand(3), a)
        with self.assertRaisesRegex(ValueError, "set_seed"):
            ms.set_seed(-1)


if __name__ == "__main__":
    unittest.main()
