"""honing: a torch-native trainer for language and vision-language models."""
