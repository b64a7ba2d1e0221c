"""The demo notebook's module, copied VERBATIM from ``../shared/seeds/binary-pe-demo-notebook.txt``.

Not a test: ``test_demo_checkpoint.py`` builds this class (the notebook's own code, print included)
to save a real demo checkpoint and compare forwards. Do not edit the class: a test checks that its
source is still a verbatim excerpt of the notebook. The imports are the notebook's first cell.
"""

# ruff: noqa: E501  (the notebook's print line is longer than 100 and stays verbatim)

import math

import torch
import torch.nn as nn


class BinaryPositionalEncoding(nn.Module):
    '''
    Binary PE: encodes position i as its binary bit pattern,
    then projects from n_bits -> d_model via a learned linear layer.
    '''
    def __init__(self, d_model, max_seq_len=512, dropout=0.1):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        n_bits = math.ceil(math.log2(max_seq_len + 1))

        # Build binary table: position i -> n_bits bit vector
        pe_binary = torch.zeros(max_seq_len, n_bits)
        for pos in range(max_seq_len):
            for bit in range(n_bits):
                pe_binary[pos, bit] = float((pos >> bit) & 1)

        self.register_buffer('pe_binary', pe_binary.unsqueeze(0))  # (1, max_seq_len, n_bits)
        self.projection = nn.Linear(n_bits, d_model, bias=False)   # learned projection

        print(f'Binary PE: {n_bits} bits -> {d_model} dims  |  projection params: {n_bits * d_model}')

    def forward(self, x):
        seq_len = x.size(1)
        pe = self.projection(self.pe_binary[:, :seq_len, :])  # (1, seq_len, d_model)
        x = x + pe
        return self.dropout(x)
