"""The base of every config choice (an enum the structured configs type their fields with)."""

import enum


class Choice(str, enum.Enum):
    """A config choice: compared, printed and serialized as its value."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
