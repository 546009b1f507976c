"""The embedded broker: kombu's filesystem transport, with messages that appear atomically.

kombu creates the message file under its final name and then writes it; a consumer that lists
the folder in between reads an empty file, fails to decode it, loses the message and stops the
worker (kombu issue #1551). Here a message is written under a temporary name that no consumer
matches, flushed, and renamed into place: a reader sees the whole file or nothing.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

ALIAS = "agentfs"


class AtomicChannel(filesystem.Channel):
    # kombu's filesystem Channel renames the virtual base's `message` to `payload` (its own stub
    # ignores that override too): no signature matches both bases, so we keep kombu's.
    def _put(self, queue: str, payload: dict[str, Any], **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # Starts with a dot and ends in .part: never '<anything>.<queue>.msg' to a reader.
        partial = os.path.join(self.data_folder_out, f".{uuid.uuid4().hex}.part")
        try:
            with open(partial, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(partial, final)
        except OSError as exc:
            if os.path.exists(partial):
                os.unlink(partial)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class AtomicFilesystemTransport(filesystem.Transport):
    Channel = AtomicChannel


def register() -> None:
    TRANSPORT_ALIASES.setdefault(ALIAS, "agentconsole.kernel.broker:AtomicFilesystemTransport")
