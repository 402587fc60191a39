"""axolotl's column settings of a ``datasets`` entry as a source's ``columns`` / ``roles``
(docs/data.md#column-mappings): ``field_messages``, ``message_property_mappings`` (or the older
``message_field_role`` / ``message_field_content``), ``roles`` and a preference set's ``field_chosen`` /
``field_rejected``; rows of other names are renamed as they are read, not refused."""

from __future__ import annotations

from typing import Any

from honing.interop.configs.translation import Keys, Translation

# the message layouts honing's formats read as they are: (messages key, role key, content key) -> format
MESSAGE_LAYOUTS = {("messages", "role", "content"): "conversation", ("conversations", "from", "value"): "sharegpt"}
ROLES = ("system", "user", "assistant", "tool")  # honing's conversation roles, axolotl's roles keys


def message_columns(t: Translation, item: Keys) -> dict[str, Any] | None:
    """``chat_template`` rows: honing's layout as it is, or ``messages`` with the entry's messages column, message
    keys and speakers mapped; None when refused."""
    field = str(item.take("field_messages", "messages"))
    mappings = item.take("message_property_mappings")
    mappings = mappings if isinstance(mappings, dict) else {}
    role = str(mappings.get("role", item.take("message_field_role", "role")))
    content = str(mappings.get("content", item.take("message_field_content", "content")))
    item.take("message_field_role")
    item.take("message_field_content")
    unknown = sorted(set(map(str, mappings)) - {"role", "content"})
    if unknown:
        t.refuse(
            item.key("message_property_mappings"), f"{', '.join(unknown)}: honing maps a message's role and content"
        )
        return None
    roles = speaker_roles(t, item)
    if roles is None:
        return None
    layout = (field, role, content)
    if layout in MESSAGE_LAYOUTS and not roles:
        return {"format": MESSAGE_LAYOUTS[layout]}
    if layout[1:] == ("from", "value"):  # ShareGPT's keys under another column: honing's sharegpt reader
        return {"format": "sharegpt", "columns": {"conversations": field}, **({"roles": roles} if roles else {})}
    columns = {
        ours: theirs for ours, theirs in (("messages", field), ("role", role), ("content", content)) if ours != theirs
    }
    # axolotl's chat_template reads ShareGPT's speakers too (its default roles): honing's conversation does not
    speakers = {"human": "user", "gpt": "assistant", **roles}
    return {"format": "conversation", **({"columns": columns} if columns else {}), "roles": speakers}


def speaker_roles(t: Translation, item: Keys) -> dict[str, str] | None:
    """axolotl's ``roles`` (honing's role -> the row's names for it) as honing's ``roles`` (the row's -> honing's)."""
    given = item.take("roles")
    if given is None:
        return {}
    if not isinstance(given, dict) or not all(
        str(role) in ROLES and isinstance(names, list) and all(isinstance(name, str) for name in names)
        for role, names in given.items()
    ):
        t.refuse(item.key("roles"), f"{given!r}: expected {{role: [names]}} with roles {', '.join(ROLES)}")
        return None
    return {name: str(role) for role, names in given.items() for name in names if name != role}


def preference_columns(item: Keys) -> dict[str, str]:
    """A preference entry's messages / chosen / rejected columns as honing's ``columns`` (empty: honing's names)."""
    fields = {"messages": item.take("field_messages", "messages"), "chosen": item.take("field_chosen", "chosen"),
              "rejected": item.take("field_rejected", "rejected")}  # fmt: skip
    return {ours: str(theirs) for ours, theirs in fields.items() if str(theirs) != ours}
