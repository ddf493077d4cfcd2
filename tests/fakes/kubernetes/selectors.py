"""Label and field selectors as the real server parses them (`?labelSelector=` / `?fieldSelector=`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Predicate = Callable[[dict[str, Any]], bool]


class SelectorError(ValueError):
    """A selector the real server would reject with 400 BadRequest."""


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a set such as `env in (a,b)`."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part.strip() for part in parts if part.strip()]


_SET = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")
_EQUALITY = re.compile(r"^([^!=\s]+)\s*(==|=|!=)\s*(\S*)$")


def parse_label_selector(text: str) -> Predicate:
    requirements: list[Predicate] = []
    for term in _split_top_level(text or ""):
        requirements.append(_label_requirement(term))
    return lambda obj: all(req(((obj.get("metadata") or {}).get("labels")) or {}) for req in requirements)


def _label_requirement(term: str) -> Callable[[dict[str, str]], bool]:
    if match := _SET.match(term):
        key, operator, values_text = match.groups()
        values = {v.strip() for v in values_text.split(",")}
        if operator == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if match := _EQUALITY.match(term):
        key, operator, value = match.groups()
        if operator == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if term.startswith("!") and re.fullmatch(r"![^\s!=(),]+", term):
        return lambda labels: term[1:] not in labels
    if re.fullmatch(r"[^\s!=(),]+", term):
        return lambda labels: term in labels
    raise SelectorError(f"unable to parse requirement: {term!r}")


def lookup(obj: dict[str, Any], path: str) -> Any:
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def parse_field_selector(text: str) -> Predicate:
    requirements: list[tuple[str, bool, str]] = []
    for term in _split_top_level(text or ""):
        match = re.fullmatch(r"([^!=]+)(==|=|!=)(.*)", term)
        if match is None:
            raise SelectorError(f"invalid selector: '{term}'; can't understand '{term}'")
        path, operator, value = match.groups()
        requirements.append((path, operator != "!=", value))

    def matches(obj: dict[str, Any]) -> bool:
        for path, equal, value in requirements:
            found = lookup(obj, path)
            found_text = "" if found is None else str(found)
            if (found_text == value) != equal:
                return False
        return True

    return matches


def match_node_selector(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())
