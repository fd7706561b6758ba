"""Shell completion scripts made from the argparse parser itself, so they never fall behind the
commands: `starverse completion bash|zsh|fish`. Commands, sub-commands, options and the choices
of options and arguments complete; ids do not (they would cost an API call per keystroke)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")


@dataclass
class Node:
    """One command level: its path (`disks attach`), sub-commands, options and fixed choices."""

    path: str
    help: str = ""
    commands: dict[str, str] = field(default_factory=dict)  # name → help
    options: dict[str, str] = field(default_factory=dict)  # --flag → help
    choices: list[str] = field(default_factory=list)


def walk(parser: argparse.ArgumentParser, path: str = "", text: str = "") -> list[Node]:
    node = Node(path=path, help=text)
    found = [node]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                node.commands[name] = helps.get(name, "")
                found += walk(sub, f"{path} {name}".strip(), helps.get(name, ""))
        elif action.option_strings:
            for option in action.option_strings:
                node.options[option] = action.help or ""
            node.choices += [str(c) for c in action.choices or []]
        elif action.choices:
            node.choices += [str(c) for c in action.choices]
    return found


def _bash(nodes: list[Node]) -> str:
    paths = [node.path for node in nodes if node.path]
    cases = []
    for node in nodes:
        words = " ".join([*node.commands, *node.options, *node.choices])
        cases.append(f'    "{node.path}") words="{words}" ;;')
    known = "|".join(f'"{path}"' for path in paths)
    return (
        '# starverse completion for bash: eval "$(starverse completion bash)"\n'
        "_starverse() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" path="" candidate words i\n'
        "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
        '    candidate="${path:+$path }${COMP_WORDS[i]}"\n'
        '    case "$candidate" in\n'
        f'      {known}) path="$candidate" ;;\n'
        "    esac\n"
        "  done\n"
        '  case "$path" in\n' + "\n".join(cases) + "\n"
        '    *) words="" ;;\n'
        "  esac\n"
        '  COMPREPLY=($(compgen -W "$words" -- "$cur"))\n'
        "}\n"
        "complete -o default -F _starverse starverse\n"
    )


def _fish_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")


def _fish(nodes: list[Node]) -> str:
    lines = ["# starverse completion for fish: starverse completion fish | source"]
    lines.append("complete -c starverse -f")
    for node in nodes:
        words = node.path.split()
        if words:
            condition = "; and ".join(f"__fish_seen_subcommand_from {word}" for word in words)
        else:
            condition = "__fish_use_subcommand"
        if node.commands and words:
            names = " ".join(node.commands)
            condition += f"; and not __fish_seen_subcommand_from {names}"
        for name, text in node.commands.items():
            lines.append(
                f"complete -c starverse -n '{condition}' -a {name} -d '{_fish_escape(text)}'"
            )
        for option, text in node.options.items():
            flag = f"-l {option[2:]}" if option.startswith("--") else f"-s {option[1:]}"
            lines.append(f"complete -c starverse -n '{condition}' {flag} -d '{_fish_escape(text)}'")
        if node.choices:
            lines.append(f"complete -c starverse -n '{condition}' -a '{' '.join(node.choices)}'")
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    nodes = walk(parser)
    if shell == "bash":
        return _bash(nodes)
    if shell == "zsh":
        # zsh runs bash completion functions through bashcompinit
        return (
            "#compdef starverse\n"
            '# starverse completion for zsh: eval "$(starverse completion zsh)"\n'
            "autoload -U +X bashcompinit && bashcompinit\n" + _bash(nodes)
        )
    if shell == "fish":
        return _fish(nodes)
    raise ValueError(f"no completion for {shell}")
