"""The import rules of docs/architecture.md: packages import only those to their right, no circles."""

import ast
import os

from tests import helpers

REPO = str(helpers.REPO)
# Left to right: a package may import those after it, never one before it.
LAYERS = (
    'pipelines',  # the commands (cli, build_index, query, sync, ...) and the jobs' packages (build/, evaluate/)
    'pipelines.common',  # what every command shares: never a command or a job
    'transforms.sync',
    'transforms.evaluation',
    'transforms.query',
    'transforms.report',
    'transforms.lineage',
    'transforms.dedup',
    'transforms.chunking',
    'transforms.features',
    'transforms.output',
    'transforms.ingest',
    'transforms',  # types, text, hashing, storage, validate
)


def layer_of(module: str) -> int:
    """The layer of the longest name in LAYERS that `module` is or lies under."""
    return max((i for i, name in enumerate(LAYERS) if module == name or module.startswith(name + '.')),
               key=lambda i: len(LAYERS[i]))


def modules():
    for top in ('pipelines', 'transforms'):
        for directory, _, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith('.py'):
                    path = os.path.join(directory, name)
                    module = os.path.relpath(path, REPO)[:-3].replace(os.sep, '.')
                    yield module.removesuffix('.__init__'), path


def imports(path: str) -> set[str]:
    """Every project module `path` imports, at any depth of the file (lazy imports count)."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding='utf-8').read())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f'{node.module}.{a.name}' for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found.update(n for n in names if n.split('.')[0] in ('pipelines', 'transforms'))
    return found


def graph() -> dict[str, set[str]]:
    known = dict(modules())
    return {m: {i for i in imports(p) if i in known and i != m} for m, p in known.items()}


def test_no_import_runs_to_the_left():
    wrong = sorted((m, i) for m, deps in graph().items() for i in deps if layer_of(i) < layer_of(m))
    assert not wrong, f'imports against the layers {LAYERS}: {wrong}'


def test_no_import_circles():
    edges = graph()
    state: dict[str, int] = {}

    def visit(module, trail):
        state[module] = 1
        for dep in sorted(edges[module]):
            if state.get(dep) == 1:
                raise AssertionError(f'import circle: {" -> ".join(trail[trail.index(dep):] + [dep])}')
            if dep not in state:
                visit(dep, trail + [dep])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])


def test_engines_stand_apart_from_the_build():
    """engines/ starts clusters for tests and benchmarks: the build never imports it, nor it the build."""
    def imported(path):
        tree = ast.parse(open(path, encoding='utf-8').read())
        return {a.name.split('.')[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
            n.module.split('.')[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}

    assert not [m for m, path in modules() if 'engines' in imported(path)]
    engines = os.path.join(REPO, 'engines')
    assert not [name for name in os.listdir(engines) if name.endswith('.py')
                and imported(os.path.join(engines, name)) & {'pipelines', 'transforms'}]
