"""ipywidgets controls for the notebooks, one module per family (plots stay in mgpukit.plots).

Each control redraws from the cost model instantly, or launches a real run on a button press.
Every function also works headless (CI runs the notebooks): it draws its initial figure once.
"""
