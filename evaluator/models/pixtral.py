"""Mistral 3's processor without torchvision.

Mistral 3 (Mistral Small 3.1 / 3.2, Magistral Small) sees an image through Pixtral's vision encoder, whose image
tokens follow the image's shape (Agrawal et al., *Pixtral 12B*, arXiv 2024, §2.1: the encoder's break and end
tokens): the image, resized to fit its longest edge in patches, becomes one `[IMG]` per patch, row by row, each
row closed by `[IMG_BREAK]`, the last one by `[IMG_END]` instead. Mistral 3 merges `spatial_merge_size` x
`spatial_merge_size` patches into one token, so a token stands for a square of `patch_size * spatial_merge_size`
pixels.

transformers ships that rule only in its `PixtralProcessor`, which it offers with torchvision alone (its module
imports the torchvision image processor), and torchvision has no CPU build on PyPI for the locked CPU torch. The
tokens, though, need no torchvision: this processor applies the rule over transformers' PIL Pixtral image
processor (`PixtralImageProcessorPil`: the same resize to whole patches, `image_sizes` in pixels after it) and the
checkpoint's tokenizer. tests/test_families.py holds its token ids to the torchvision `PixtralProcessor`'s, run
in the vLLM venv, where torchvision is installed.
"""

from __future__ import annotations

from transformers.processing_utils import ProcessorMixin


class PixtralProcessorPil(ProcessorMixin):
    """Pixtral's image tokens over the PIL image processor (see the module docstring). `patch_size` and
    `spatial_merge_size` are the checkpoint's processor_config.json settings."""

    def __init__(self, image_processor=None, tokenizer=None, patch_size: int = 16, spatial_merge_size: int = 1,
                 chat_template=None, image_token: str = "[IMG]", image_break_token: str = "[IMG_BREAK]",
                 image_end_token: str = "[IMG_END]", **kwargs):
        super().__init__(image_processor, tokenizer, chat_template=chat_template)
        self.patch_size, self.spatial_merge_size = patch_size, spatial_merge_size
        self.image_token, self.image_break_token, self.image_end_token = image_token, image_break_token, image_end_token
        self.image_token_id = tokenizer.convert_tokens_to_ids(image_token)
        self.image_token_ids = [tokenizer.convert_tokens_to_ids(t) for t in
                                (image_token, image_break_token, image_end_token)]

    @property
    def token_pixels(self) -> int:
        """The side of the square of pixels one image token stands for."""
        return self.patch_size * self.spatial_merge_size

    def _process_images(self, images, **images_kwargs):
        return super()._process_images(images, **{**images_kwargs, "patch_size": self.token_pixels})

    def replace_image_token(self, image_inputs: dict, image_idx: int, **kwargs) -> str:
        """An image's tokens: one row per `token_pixels` of its resized height, each of one `[IMG]` per
        `token_pixels` of its width and a closing `[IMG_BREAK]`, the last row closed by `[IMG_END]`."""
        height, width = (int(v) for v in image_inputs["image_sizes"][image_idx])
        rows, columns = height // self.token_pixels, width // self.token_pixels
        row = self.image_token * columns
        return (row + self.image_break_token) * (rows - 1) + row + self.image_end_token

    @property
    def model_input_names(self):
        return self.tokenizer.model_input_names + self.image_processor.model_input_names + ["image_sizes"]


# transformers' processor class name -> the class vlbench builds in its place where torchvision is missing
WITHOUT_TORCHVISION = {"PixtralProcessor": PixtralProcessorPil}
