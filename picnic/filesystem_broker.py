"""kombu's filesystem transport (the embedded broker of `make run`) with messages that appear
whole.

kombu writes a message by creating its file in the queue folder and then writing into it; a
consumer that lists the folder in between moves the still-empty file away, reads "" and the
worker dies on the JSON error (`Unrecoverable error: JSONDecodeError`), which stops `make
run`. The beat sends several tasks at once, so it happens within minutes. Here a message is
written in a staging folder beside the queue's (the same file system) and renamed into it
when complete: a rename is atomic, so a consumer sees no file or the whole message.
"""

from __future__ import annotations

import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    @property
    def staging_folder(self) -> str:
        """Where a message is written before it is renamed into the queue's folder."""
        return self.transport_options.get(
            "staging_folder", os.path.join(os.path.dirname(self.data_folder_out), "staging")
        )

    def _put(self, queue, payload, **kwargs):
        # The name kombu gives a message ("<ms>_<uuid>.<queue>.msg"), read in that order.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        staged = os.path.join(self.staging_folder, name)
        try:
            os.makedirs(self.staging_folder, exist_ok=True)
            with open(staged, "wb") as file:
                file.write(str_to_bytes(dumps(payload)))
            os.replace(staged, os.path.join(self.data_folder_out, name))
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to {self.data_folder_out}") from exc


class Transport(filesystem.Transport):
    Channel = Channel
