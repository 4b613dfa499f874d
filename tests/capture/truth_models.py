"""Models written by hand for truth_runs.py, as users write their own: a decoder with its own KV
cache class, a mixture of experts routed by index, a diffusion-style UNet."""

import torch


class HandStore:
    """A decoder's own KV cache (the user's class, the user's names): one preallocated buffer per
    layer and tensor, written in place at each position."""

    def __init__(self, layers, batch, heads, length, head_dim, dtype):
        self.keys = [torch.zeros(batch, heads, length, head_dim, device="cuda", dtype=dtype) for _ in range(layers)]
        self.vals = [torch.zeros(batch, heads, length, head_dim, device="cuda", dtype=dtype) for _ in range(layers)]


class HandBlock(torch.nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.out = torch.nn.Linear(h, h)
        self.norm2 = torch.nn.LayerNorm(h)
        self.up = torch.nn.Linear(h, 4 * h)
        self.down = torch.nn.Linear(4 * h, h)

    def forward(self, x, store, i, pos, grow):
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        if grow:
            store[0][i] = k if store[0][i] is None else torch.cat([store[0][i], k], dim=2)
            store[1][i] = v if store[1][i] is None else torch.cat([store[1][i], v], dim=2)
            ks, vs = store[0][i], store[1][i]
        else:
            store.keys[i][:, :, pos:pos + t] = k
            store.vals[i][:, :, pos:pos + t] = v
            ks, vs = store.keys[i][:, :, :pos + t], store.vals[i][:, :, :pos + t]
        a = torch.nn.functional.scaled_dot_product_attention(q, ks, vs, is_causal=t > 1)
        x = x + self.out(a.transpose(1, 2).reshape(b, t, h))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class HandDecoder(torch.nn.Module):
    def __init__(self, vocab=16000, h=1024, heads=16, layers=8):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, h)
        self.blocks = torch.nn.ModuleList([HandBlock(h, heads) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)

    def forward(self, ids, store, pos, grow):
        x = self.emb(ids)
        for i, blk in enumerate(self.blocks):
            x = blk(x, store, i, pos, grow)
        return self.head(self.norm(x[:, -1:]))




class Experts(torch.nn.Module):
    """A top-2 mixture of experts written by hand: tokens gathered per expert by index."""

    def __init__(self, h=1024, n=8, ffn=2048):
        super().__init__()
        self.router = torch.nn.Linear(h, n, bias=False)
        self.up = torch.nn.ModuleList([torch.nn.Linear(h, ffn, bias=False) for _ in range(n)])
        self.down = torch.nn.ModuleList([torch.nn.Linear(ffn, h, bias=False) for _ in range(n)])

    def forward(self, x):
        b, t, h = x.shape
        flat = x.reshape(-1, h)
        weights, chosen = torch.topk(torch.softmax(self.router(flat), -1), 2, dim=-1)
        out = torch.zeros_like(flat)
        for e in range(len(self.up)):
            rows, slot = torch.where(chosen == e)
            if rows.numel() == 0:
                continue
            y = self.down[e](torch.nn.functional.silu(self.up[e](flat[rows])))
            out = out.index_add(0, rows, (y * weights[rows, slot, None]).to(out.dtype))
        return x + out.reshape(b, t, h)


class MoeModel(torch.nn.Module):
    def __init__(self, layers=4, h=1024, vocab=16000):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, h)
        self.blocks = torch.nn.ModuleList([Experts(h) for _ in range(layers)])
        self.norm = torch.nn.LayerNorm(h)
        self.head = torch.nn.Linear(h, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))




class TinyUnet(torch.nn.Module):
    """A diffusion-style UNet: conv blocks with GroupNorm and SiLU, down and up with skips."""

    def __init__(self, c=128):
        super().__init__()

        def block(i, o):
            return torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, padding=1), torch.nn.GroupNorm(32, o), torch.nn.SiLU(),
                                       torch.nn.Conv2d(o, o, 3, padding=1), torch.nn.GroupNorm(32, o), torch.nn.SiLU())

        self.inp = torch.nn.Conv2d(4, c, 3, padding=1)
        self.d1, self.d2, self.d3 = block(c, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.mid = block(4 * c, 4 * c)
        self.u3, self.u2, self.u1 = block(8 * c, 2 * c), block(4 * c, c), block(2 * c, c)
        self.out = torch.nn.Conv2d(c, 4, 3, padding=1)

    def forward(self, x):
        x = self.inp(x)
        s1 = self.d1(x)
        s2 = self.d2(torch.nn.functional.avg_pool2d(s1, 2))
        s3 = self.d3(torch.nn.functional.avg_pool2d(s2, 2))
        m = self.mid(s3)
        u = self.u3(torch.cat([m, s3], 1))
        u = self.u2(torch.cat([torch.nn.functional.interpolate(u, scale_factor=2), s2], 1))
        u = self.u1(torch.cat([torch.nn.functional.interpolate(u, scale_factor=2), s1], 1))
        return self.out(u)


