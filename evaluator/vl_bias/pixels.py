"""The differentiable pixel paths of CounterBias's attack (Zhang, Wang, Sang, ACM MM 2022, Eq. 3): the
attack moves pixels in [0, 1] after a model's own resize, and the processor's normalisation (and, for
Qwen2-VL, its patch layout) runs inside the forward pass so that gradients reach the pixels.
`pixel_layout` recognises a processor's layout and checks on a test image that the path reproduces the
processor's own pixel_values."""

from __future__ import annotations


class PlainPixels:
    """pixel_values (N, 3, H, W): one resized, rescaled, normalised image per picture (LLaVA, Gemma 3...)."""

    name = "one (3, H, W) image per picture"

    def __init__(self, image_processor):
        import torch

        self.processor = image_processor
        self.mean = torch.tensor(image_processor.image_mean, dtype=torch.float32).view(3, 1, 1)
        self.std = torch.tensor(image_processor.image_std, dtype=torch.float32).view(3, 1, 1)

    def image_tensor(self, image):
        return self.processor(images=[image], do_normalize=False, return_tensors="pt")["pixel_values"][0].float()

    def pixel_values(self, xs: list):
        import torch

        return torch.stack([(x - self.mean.to(x.device)) / self.std.to(x.device) for x in xs])


class PatchPixels(PlainPixels):
    """Qwen2-VL's layout: each image cut into patch_size^2 patches, grouped merge_size x merge_size, each
    patch repeated temporal_patch_size times and flattened: (patches, C x T x P x P), images concatenated."""

    name = "Qwen2-VL patches"

    def __init__(self, image_processor):
        super().__init__(image_processor)
        self.patch = image_processor.patch_size
        self.merge = image_processor.merge_size
        self.temporal = image_processor.temporal_patch_size

    def image_tensor(self, image):
        out = self.processor(images=[image], do_normalize=False, return_tensors="pt")
        _, gh, gw = (int(v) for v in out["image_grid_thw"][0])
        p, m = self.patch, self.merge
        flat = out["pixel_values"].float().reshape(gh // m, gw // m, m, m, 3, self.temporal, p, p)[:, :, :, :, :, 0]
        return flat.permute(4, 0, 2, 5, 1, 3, 6).reshape(3, gh * p, gw * p)

    def patchify(self, x):
        p, m = self.patch, self.merge
        gh, gw = x.shape[1] // p, x.shape[2] // p
        patches = x.reshape(3, gh // m, m, p, gw // m, m, p).permute(1, 4, 2, 5, 0, 3, 6).unsqueeze(5)
        return patches.expand(*patches.shape[:5], self.temporal, p, p).reshape(gh * gw, 3 * self.temporal * p * p)

    def pixel_values(self, xs: list):
        import torch

        return torch.cat([self.patchify((x - self.mean.to(x.device)) / self.std.to(x.device)) for x in xs])


def pixel_layout(image_processor) -> tuple[PlainPixels | None, str]:
    """(layout, "") when the processor's output on a test image is one the differentiable path reproduces
    (to 1e-4), else (None, what it gives)."""
    from PIL import Image

    test = Image.new("RGB", (61, 47), (200, 30, 90))
    for x in range(0, 61, 3):
        test.putpixel((x, x % 47), (10, 220, 40))
    try:
        out = image_processor(images=[test], return_tensors="pt")
    except Exception as exc:  # noqa: BLE001 -- a processor's own failure is reported, not raised
        return None, f"its image processor fails on a test image ({type(exc).__name__})"
    pixels = out.get("pixel_values")
    keys = set(out.keys())
    if pixels is None:
        return None, "its image processor gives no pixel_values"
    if keys == {"pixel_values", "image_grid_thw"} and pixels.ndim == 2:
        layout = PatchPixels(image_processor)
    elif keys == {"pixel_values"} and pixels.ndim == 4 and pixels.shape[0] == 1:
        layout = PlainPixels(image_processor)
    else:
        return None, f"its image processor gives {', '.join(sorted(keys))} of shape {tuple(pixels.shape)}"
    x = layout.image_tensor(test)
    again = layout.pixel_values([x])
    if x.min() < -1e-6 or x.max() > 1 + 1e-6 or again.shape != pixels.shape or \
            (again - pixels.float()).abs().max() > 1e-4:
        return None, f"its processor's pixels are not a normalised {layout.name} of pixels in [0, 1]"
    return layout, ""
