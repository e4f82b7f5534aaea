"""`bertkit.store`: the public name of the feature store, for users' scripts (the code is `bertkit.features.store`).

    st = bertkit.store.open("runs/sst2-cls")          # st.features (memmap), st.labels, st.label_map, st.manifest
    splits = bertkit.store.open_splits("runs/sst2")   # {"train": Store, "dev": Store, "test": Store}
"""

from bertkit.features.store import FORMAT, Store, StoreWriter, open, open_splits, shard_ranges  # noqa: F401, A004

__all__ = ["FORMAT", "Store", "StoreWriter", "open", "open_splits", "shard_ranges"]
