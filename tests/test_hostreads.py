"""The host-read counter counts each way Python can wait for a tensor's value, and nothing else."""
import torch

from specvlm.runtime.hostreads import HostReadCounter


def test_each_kind_of_host_read_is_counted_once():
    t = torch.tensor([3, 1, 2])
    with HostReadCounter() as reads:
        int(t[0]); float(t[1]); bool(t[2] > 0); t.tolist(); t[0].item(); t.cpu()
        t[t > 1]; torch.nonzero(t); torch.equal(t, t); [1, 2, 3, 4][t[0]]; t.numpy()
    assert reads.by_kind == {"int": 1, "float": 1, "bool": 1, "tolist": 1, "item": 1, "cpu": 1,
                             "bool_index": 1, "nonzero": 1, "equal": 1, "index": 1, "numpy": 1}
    assert reads.count == 11


def test_device_side_work_is_not_counted():
    t = torch.arange(12.0).reshape(3, 4)
    with HostReadCounter() as reads:
        u = t.argmax(-1)
        v = torch.where(u > 1, u - 1, torch.zeros_like(u))
        w = t.index_select(0, v).to(torch.float16).to(t.device)
        t[torch.tensor([0, 2])] = w[:2].float()
        torch.topk(t, 2, dim=-1)
    assert reads.count == 0


def test_reset_starts_from_zero():
    t = torch.ones(2)
    with HostReadCounter() as reads:
        t.tolist()
        reads.reset()
        t.sum().item()
    assert reads.count == 1 and reads.by_kind == {"item": 1}
