"""The person's presses on held message cards, made when a scenario says so.

A press is the same ``held_message_pass`` / ``held_message_dismiss`` the
card's buttons call; the scenario names the message by its place among those
that came to the chat (1, 2, …), as the report numbers them.
"""

from __future__ import annotations

from typing import Any

from chats.models import Conversation
from chats.runtime.chats import ConchError
from together.messages import NotDelivered, held_message_dismiss, held_message_pass
from together.models import ChatMessage
from together.play.scenario import PRESS_WORDS, ChatSpec, Press

PRESSES = {"pass": held_message_pass, "dismiss": held_message_dismiss}

ERR_NOT_COME_YET = "message {number} hasn't come to this chat yet ({came} came so far)."
ERR_PRESS_FAILED = "{where}: {button} (message {number}) failed: {why}"


def arrived(chat: Conversation) -> list[ChatMessage]:
    """The messages that came to ``chat``, in the order they arrived: message 1, 2, …"""
    return list(ChatMessage.objects.filter(receiver=chat).order_by("pk"))


def held_press(*, chat: Conversation, number: int, action: str) -> ChatMessage:
    """The person presses Pass it on or Dismiss on the ``number``-th message that came to ``chat``.

    Raises ConchError if it hasn't come yet, or isn't held any more.
    """
    came = arrived(chat)
    if not 1 <= number <= len(came):
        raise ConchError(ERR_NOT_COME_YET.format(number=number, came=len(came)))
    return PRESSES[action](message=came[number - 1])


def press_make(
    *, chat: Conversation, spec: ChatSpec, index: int, press: Press, made: list[dict[str, Any]]
) -> str:
    """Make the scenario's ``index``-th press on ``chat`` and note it in ``made``.

    Returns why it couldn't be made, which stops the play, or "" if it was.
    """
    said = ""
    try:
        message = held_press(chat=chat, number=press.number, action=press.action)
    except NotDelivered as exc:  # the press was made: the chat no longer takes the message
        message, said = arrived(chat)[press.number - 1], str(exc)
    except ConchError as exc:
        return ERR_PRESS_FAILED.format(
            where=f'chat "{spec.name}": presses[{index}] at tick {press.at}',
            button=PRESS_WORDS[press.action],
            number=press.number,
            why=exc,
        )
    made.append(
        {
            "at": press.at,
            "action": press.action,
            "message": press.number,
            "id": message.message_id,
            "state": message.state,
            **({"said": said} if said else {}),
        }
    )
    return ""
