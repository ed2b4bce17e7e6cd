"""End to end: real text -> create_tfrecords -> pretraining_dataset -> a tiny BERT learns.

The corpus is the packaged sample corpus (40 documents of real English prose); the vocabulary
is built here from its frequent words plus the characters and ``##`` pieces, so rare words
become WordPieces as they would with a real vocabulary. The model is a two-layer BERT in
miniature (token + position + segment embeddings, Keras ``MultiHeadAttention`` blocks, an MLM
head tied to the embeddings and gathered at ``masked_lm_positions``, an NSP head on
``[CLS]``), trained with a plain ``tf.GradientTape`` step. The test asserts that the masked-LM
loss falls clearly, which needs correctly aligned ids, positions, labels, weights and masks.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from conftest import base_args, write_vocab  # noqa: E402

from bert_data.tools.create import main as create_tfrecords  # noqa: E402
from bert_data.reader.dataset import pretraining_dataset  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "bert_data" / "sample_data"
SEQ, PRED = 64, 10
BATCH, STEPS = 16, 60
HIDDEN, HEADS, LAYERS, FFN = 64, 4, 2, 128


def words_of(text: str):
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(c for c in text if unicodedata.category(c) != "Mn")
    return re.findall(r"[a-z]+", text)


def build_vocab(path: Path, docs) -> Path:
    counts = Counter()
    for doc in docs:
        counts.update(words_of(doc.read_text(encoding="utf-8")))
    frequent = sorted(w for w, n in counts.items() if n >= 2 and len(w) > 1)
    return write_vocab(path, extra=[f"##{d}" for d in range(10)] + frequent)


class TinyBert(keras.Model):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        init = keras.initializers.TruncatedNormal(stddev=0.02)
        self.token_embedding = keras.layers.Embedding(vocab_size, HIDDEN, embeddings_initializer=init)
        self.position_embedding = keras.layers.Embedding(SEQ, HIDDEN, embeddings_initializer=init)
        self.segment_embedding = keras.layers.Embedding(2, HIDDEN, embeddings_initializer=init)
        self.embedding_norm = keras.layers.LayerNormalization(epsilon=1e-12)
        self.blocks = []
        for _ in range(LAYERS):
            self.blocks.append(
                (
                    keras.layers.MultiHeadAttention(HEADS, HIDDEN // HEADS, kernel_initializer=init),
                    keras.layers.LayerNormalization(epsilon=1e-12),
                    keras.layers.Dense(FFN, activation="gelu", kernel_initializer=init),
                    keras.layers.Dense(HIDDEN, kernel_initializer=init),
                    keras.layers.LayerNormalization(epsilon=1e-12),
                )
            )
        self.mlm_transform = keras.layers.Dense(HIDDEN, activation="gelu", kernel_initializer=init)
        self.mlm_norm = keras.layers.LayerNormalization(epsilon=1e-12)
        self.mlm_bias = self.add_weight(shape=(vocab_size,), initializer="zeros", name="mlm_bias")
        self.pooler = keras.layers.Dense(HIDDEN, activation="tanh", kernel_initializer=init)
        self.nsp = keras.layers.Dense(2, kernel_initializer=init)

    def call(self, features):
        ids = features["input_ids"]
        positions = tf.range(tf.shape(ids)[1])[tf.newaxis, :]
        x = self.token_embedding(ids) + self.position_embedding(positions) + self.segment_embedding(
            features["segment_ids"]
        )
        x = self.embedding_norm(x)
        mask = tf.cast(features["input_mask"], tf.bool)
        attention_mask = mask[:, tf.newaxis, :] & tf.ones_like(mask)[:, :, tf.newaxis]  # [B, query, key]
        for attention, norm1, ffn_in, ffn_out, norm2 in self.blocks:
            x = norm1(x + attention(x, x, attention_mask=attention_mask))
            x = norm2(x + ffn_out(ffn_in(x)))
        gathered = tf.gather(x, features["masked_lm_positions"], batch_dims=1)  # [B, PRED, HIDDEN]
        h = self.mlm_norm(self.mlm_transform(gathered))
        mlm_logits = tf.einsum("bph,vh->bpv", h, self.token_embedding.embeddings) + self.mlm_bias
        nsp_logits = self.nsp(self.pooler(x[:, 0]))
        return mlm_logits, nsp_logits


def losses(features, mlm_logits, nsp_logits):
    per_position = tf.keras.losses.sparse_categorical_crossentropy(
        features["masked_lm_ids"], mlm_logits, from_logits=True
    )
    weights = features["masked_lm_weights"]
    mlm = tf.reduce_sum(per_position * weights) / (tf.reduce_sum(weights) + 1e-5)
    nsp = tf.reduce_mean(
        tf.keras.losses.sparse_categorical_crossentropy(features["next_sentence_labels"][:, 0], nsp_logits, True)
    )
    return mlm, nsp


def test_tiny_bert_learns_from_the_records(tmp_path):
    if not (SAMPLE / "metadata.txt").exists():
        pytest.skip("sample corpus missing")
    started = time.perf_counter()
    docs = sorted((SAMPLE / "docs").glob("*.txt"))
    vocab = build_vocab(tmp_path / "vocab.txt", docs)
    out = tmp_path / "records"
    args = base_args(
        SAMPLE / "metadata.txt", vocab, out, max_seq_length=SEQ, max_predictions_per_seq=PRED, dupe_factor=3,
        num_output_files=4, split_num=10, seed=7,
    )
    assert create_tfrecords(args) == 0

    tf.keras.utils.set_random_seed(1234)
    vocab_size = len(vocab.read_text(encoding="utf-8").splitlines())
    dataset = pretraining_dataset(out, BATCH, SEQ, PRED, is_training=True, num_cpu_threads=2, seed=1234)
    model = TinyBert(vocab_size)
    optimizer = keras.optimizers.Adam(learning_rate=2e-3)

    @tf.function
    def train_step(features):
        with tf.GradientTape() as tape:
            mlm_logits, nsp_logits = model(features)
            mlm, nsp = losses(features, mlm_logits, nsp_logits)
            loss = mlm + nsp
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return mlm, nsp

    history = []
    for features in dataset.take(STEPS):
        mlm, nsp = train_step(features)
        history.append((float(mlm), float(nsp)))
    mlm_history = np.array([h[0] for h in history])
    assert len(mlm_history) == STEPS and np.isfinite(mlm_history).all()
    first, last = mlm_history[:10].mean(), mlm_history[-10:].mean()
    assert first > 0.8 * np.log(vocab_size)  # starts near chance
    assert last < 0.85 * first, f"masked-LM loss did not fall: first 10 steps {first:.3f}, last 10 {last:.3f}"
    assert time.perf_counter() - started < 60
