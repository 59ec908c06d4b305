"""Chains by name and explorer links, for every page (staff timelines, console, admin, the
signing page), all read from the one chain table (core.chains).

`{% load chains %}`:
- `{{ action.chain_id|chain_name }}`: "Gnosis (local)"; an unconfigured id reads "chain 5".
- `{% chain action.chain_id %}`: the name with the id (and CAIP-2 id) on hover.
- `{% explorer_url action.chain_id "tx" action.tx_hash as url %}`: the bare link, or "".
- `{% explorer action.chain_id "tx" action.tx_hash %}`: the value in <code>, a link to the
  chain's explorer when the table has one, plain otherwise; `short=True` shows 0x1234…abcd.
"""

from __future__ import annotations

from django import template
from django.utils.html import format_html

from core import chains as core_chains

register = template.Library()


def explorer_url(chain_id, kind: str, value) -> str | None:
    """The explorer link of a tx hash, address, block or token, or None (no explorer for the
    chain, an unconfigured chain, or nothing to link)."""
    if chain_id in (None, "") or value in (None, ""):
        return None
    try:
        return core_chains.get_chain(chain_id).explorer(kind, str(value))
    except core_chains.UnknownChain:
        return None


def short(value: str) -> str:
    """0x15d3…6A65, the way wallets show hashes and addresses."""
    return f"{value[:6]}…{value[-4:]}" if value.startswith("0x") and len(value) > 14 else value


@register.simple_tag(name="explorer_url")
def explorer_url_tag(chain_id, kind: str, value) -> str:
    """`{% explorer_url chain_id "tx" hash as url %}`: the link, or "" where there is none."""
    return explorer_url(chain_id, kind, value) or ""


@register.filter
def chain_name(chain_id) -> str:
    return core_chains.chain_name(chain_id)


@register.simple_tag
def chain(chain_id) -> str:
    if chain_id in (None, ""):
        return "—"
    return format_html(
        '<span class="chain" data-chain-id="{}" title="chain id {} (eip155:{})">{}</span>',
        chain_id,
        chain_id,
        chain_id,
        core_chains.chain_name(chain_id),
    )


@register.simple_tag
def explorer(chain_id, kind: str, value, short_form: bool = False) -> str:
    if value in (None, ""):
        return "—"
    text = str(value)
    shown = short(text) if short_form else text
    url = explorer_url(chain_id, kind, text)
    if url is None:
        return format_html('<code title="{}">{}</code>', text, shown)
    return format_html(
        '<a class="explorer" href="{}" rel="noopener noreferrer" title="{}"><code>{}</code></a>',
        url,
        text,
        shown,
    )
