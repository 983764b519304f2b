"""VQA v2 / VQA-CP evaluation: the task shared by both and the official VQA accuracy."""
