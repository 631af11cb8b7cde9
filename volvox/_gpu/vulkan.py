"""Vulkan backend through the ``vulkan`` PyPI package (cffi; loads libvulkan at run time).

Buffers live in host-visible, host-coherent memory, mapped once: uploads and downloads are
memcpys (on a discrete GPU this trades bandwidth for simplicity; lavapipe and integrated GPUs
have only such memory anyway). A recording is one command buffer that stays executable: per
dispatch a descriptor set (all allocated from the recording's own pool in one call), the
dispatch and a compute->compute barrier, then a compute->host barrier; its Params structs sit in
its own mapped buffer, which the descriptor sets point into. Running it, the first time or on
replay, is a params memcpy (when they changed), one vkQueueSubmit and one fence wait.

The package's struct constructors drop falsy keyword arguments, so zero/False fields are
simply left at their zero defaults, never passed.
"""

from __future__ import annotations

import numpy as np

from volvox._gpu.backend import (BackendUnavailable, Buffer, Device, Record, Readback, Recording, kernel_info, spirv_code,
                                 software_adapter, timed_out)

try:
    import vulkan as vk
except Exception as e:  # the package, or its cffi library, is missing
    raise BackendUnavailable(f"python package 'vulkan' unavailable: {e}") from None


class _VkRecording(Recording):
    """A command buffer, the descriptor pool its sets come from, its params buffer and submit info."""

    def __init__(self, cmd, pool, params: Buffer, submit_info):
        self.cmd, self.pool, self.param_buf, self.submit_info = cmd, pool, params, submit_info


class VulkanDevice(Device):
    """The first Vulkan physical device with a compute queue (a hardware one preferred)."""

    name = "vulkan"

    def __init__(self):
        super().__init__()
        try:
            app = vk.VkApplicationInfo(sType=vk.VK_STRUCTURE_TYPE_APPLICATION_INFO, pApplicationName="volvox",
                                       apiVersion=vk.VK_MAKE_VERSION(1, 1, 0))
            self.instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(
                sType=vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, pApplicationInfo=app), None)
            physical = vk.vkEnumeratePhysicalDevices(self.instance)
        except Exception as e:  # no loader, no ICD
            raise BackendUnavailable(f"no Vulkan driver ({type(e).__name__}: {e})") from None
        candidates = []
        for pd in physical:
            props = vk.vkGetPhysicalDeviceProperties(pd)
            queues = vk.vkGetPhysicalDeviceQueueFamilyProperties(pd)
            family = next((i for i, q in enumerate(queues) if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT), None)
            if family is not None:
                cpu_type = props.deviceType == vk.VK_PHYSICAL_DEVICE_TYPE_CPU
                software = software_adapter(props.deviceName, "cpu" if cpu_type else "")
                candidates.append((software, pd, props, family))
        if not candidates:
            raise BackendUnavailable("no Vulkan device with a compute queue")
        self.software, self.physical, props, self.family = sorted(candidates, key=lambda c: c[0])[0]
        self.description = props.deviceName
        self.max_binding = int(props.limits.maxStorageBufferRange)
        queue_info = vk.VkDeviceQueueCreateInfo(sType=vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                                queueFamilyIndex=self.family, queueCount=1, pQueuePriorities=[1.0])
        self.device = vk.vkCreateDevice(self.physical, vk.VkDeviceCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, queueCreateInfoCount=1, pQueueCreateInfos=[queue_info]), None)
        self.queue = vk.vkGetDeviceQueue(self.device, self.family, 0)
        self.memory_type = self._host_visible_type()
        self.cmd_pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, queueFamilyIndex=self.family,
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT), None)
        self.fence = vk.vkCreateFence(self.device, vk.VkFenceCreateInfo(sType=vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO), None)
        self.pipelines: dict[str, tuple] = {}  # kernel -> (pipeline, layout, set layout, shader module)
        self.buffers: dict[int, Buffer] = {}   # serial -> every live buffer (destroyed at close)
        self.recordings: set[_VkRecording] = set()  # live ones (destroyed at close)

    def _host_visible_type(self) -> int:
        want = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
        mem = vk.vkGetPhysicalDeviceMemoryProperties(self.physical)
        for i in range(mem.memoryTypeCount):
            if mem.memoryTypes[i].propertyFlags & want == want:
                self.max_buffer = int(mem.memoryHeaps[mem.memoryTypes[i].heapIndex].size)
                return i
        raise BackendUnavailable("Vulkan device has no host-visible coherent memory")

    def _alloc(self, nbytes: int) -> Buffer:
        usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        buf = vk.vkCreateBuffer(self.device, vk.VkBufferCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, size=nbytes, usage=usage,
            sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE), None)
        memory = None
        try:
            req = vk.vkGetBufferMemoryRequirements(self.device, buf)
            if not req.memoryTypeBits & (1 << self.memory_type):
                raise BackendUnavailable("Vulkan storage buffers cannot live in host-visible memory on this device")
            memory = vk.vkAllocateMemory(self.device, vk.VkMemoryAllocateInfo(
                sType=vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, allocationSize=req.size,
                memoryTypeIndex=self.memory_type), None)
            vk.vkBindBufferMemory(self.device, buf, memory, 0)
            mapped = np.frombuffer(vk.vkMapMemory(self.device, memory, 0, nbytes, 0), dtype=np.uint8)  # (nbytes,) view
        except Exception:  # out of memory: release what was made
            if memory is not None:
                vk.vkFreeMemory(self.device, memory, None)
            vk.vkDestroyBuffer(self.device, buf, None)
            raise
        b = Buffer(buf, nbytes, (memory, mapped))
        self.buffers[b.serial] = b
        return b

    def _free(self, buf: Buffer) -> None:
        del self.buffers[buf.serial]
        vk.vkDestroyBuffer(self.device, buf.native, None)
        vk.vkFreeMemory(self.device, buf.extra[0], None)

    def _write(self, buf: Buffer, data) -> None:
        buf.extra[1][:len(data)] = np.frombuffer(data, dtype=np.uint8)

    def supports(self, kernel: str) -> bool:
        """Every kernel fits Vulkan's guaranteed limits; true once its pipeline builds."""
        try:
            self._pipeline(kernel)
            return True
        except Exception:
            return False

    def _pipeline(self, kernel: str) -> tuple:
        if kernel in self.pipelines:
            return self.pipelines[kernel]
        code = spirv_code(kernel)
        module = vk.vkCreateShaderModule(self.device, vk.VkShaderModuleCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, codeSize=len(code), pCode=code), None)
        n = kernel_info(kernel).n_buffers + 1
        bindings = [vk.VkDescriptorSetLayoutBinding(binding=i, descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                    descriptorCount=1, stageFlags=vk.VK_SHADER_STAGE_COMPUTE_BIT)
                    for i in range(n)]
        set_layout = vk.vkCreateDescriptorSetLayout(self.device, vk.VkDescriptorSetLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, bindingCount=n, pBindings=bindings), None)
        layout = vk.vkCreatePipelineLayout(self.device, vk.VkPipelineLayoutCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, setLayoutCount=1, pSetLayouts=[set_layout]), None)
        stage = vk.VkPipelineShaderStageCreateInfo(sType=vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                                   stage=vk.VK_SHADER_STAGE_COMPUTE_BIT, module=module, pName="main")
        pipeline = vk.vkCreateComputePipelines(self.device, None, 1, [vk.VkComputePipelineCreateInfo(
            sType=vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, stage=stage, layout=layout)], None)[0]
        self.pipelines[kernel] = (pipeline, layout, set_layout, module)
        return self.pipelines[kernel]

    def _record(self, records: list[Record], offsets: list[int], params_nbytes: int,
                reads: list[Readback]) -> _VkRecording:
        pbuf = self._alloc(max(params_nbytes, 16))  # (params_nbytes,) every dispatch's Params struct
        pool = cmd = None
        try:
            sets = []
            if records:
                n_desc = sum(len(r.buffers) + 1 for r in records)
                pool = vk.vkCreateDescriptorPool(self.device, vk.VkDescriptorPoolCreateInfo(
                    sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, maxSets=len(records), poolSizeCount=1,
                    pPoolSizes=[vk.VkDescriptorPoolSize(type=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                        descriptorCount=n_desc)]), None)
                sets = vk.vkAllocateDescriptorSets(self.device, vk.VkDescriptorSetAllocateInfo(
                    sType=vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, descriptorPool=pool,
                    descriptorSetCount=len(records), pSetLayouts=[self._pipeline(r.kernel)[2] for r in records]))
                writes = []
                for rec, off, dset in zip(records, offsets, sets):
                    infos = [vk.VkDescriptorBufferInfo(buffer=b.native, range=b.nbytes) for b in rec.buffers]
                    infos.append(vk.VkDescriptorBufferInfo(buffer=pbuf.native, offset=off, range=len(rec.params)))
                    writes += [vk.VkWriteDescriptorSet(sType=vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, dstSet=dset,
                                                       dstBinding=i, descriptorCount=1, pBufferInfo=[info],
                                                       descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER)
                               for i, info in enumerate(infos)]
                vk.vkUpdateDescriptorSets(self.device, len(writes), writes, 0, None)
            cmd = vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
                sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, commandPool=self.cmd_pool,
                level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
            vk.vkBeginCommandBuffer(cmd, vk.VkCommandBufferBeginInfo(
                sType=vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO))  # no ONE_TIME_SUBMIT: replayed
            between = vk.VkMemoryBarrier(sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                         srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT,
                                         dstAccessMask=vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT)
            bound = None
            for rec, dset in zip(records, sets):
                pipeline, layout, _, _ = self._pipeline(rec.kernel)
                if pipeline != bound:
                    vk.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
                    bound = pipeline
                vk.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, [dset], 0, None)
                vk.vkCmdDispatch(cmd, *rec.grid)
                vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                        vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, [between], 0, None, 0, None)
            to_host = vk.VkMemoryBarrier(sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                         srcAccessMask=vk.VK_ACCESS_SHADER_WRITE_BIT,
                                         dstAccessMask=vk.VK_ACCESS_HOST_READ_BIT)
            vk.vkCmdPipelineBarrier(cmd, vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                                    0, 1, [to_host], 0, None, 0, None)
            vk.vkEndCommandBuffer(cmd)
        except Exception:
            self._discard(_VkRecording(cmd, pool, pbuf, None))
            raise
        self.dispatches_recorded += len(records)
        info = vk.VkSubmitInfo(sType=vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=1, pCommandBuffers=[cmd])
        rec = _VkRecording(cmd, pool, pbuf, info)
        self.recordings.add(rec)
        return rec

    def _submit(self, rec: _VkRecording, params: bytes | None, reads: list[Readback], timeout_ns: int) -> None:
        if params is not None:
            self._write(rec.param_buf, params)
        vk.vkQueueSubmit(self.queue, 1, [rec.submit_info], self.fence)
        self.submits += 1
        try:
            with self.waiting():
                vk.vkWaitForFences(self.device, 1, [self.fence], vk.VK_TRUE, timeout_ns)
        except vk.VkTimeout:
            raise timed_out(timeout_ns) from None
        vk.vkResetFences(self.device, 1, [self.fence])
        for r in reads:  # host-coherent memory, made visible by the fence and the final barrier
            r.data = r.buffer.extra[1][:r.nbytes].copy()

    def _discard(self, rec: _VkRecording) -> None:
        if self.device is None:  # closed: everything is gone already
            return
        self.recordings.discard(rec)
        if rec.cmd is not None:
            vk.vkFreeCommandBuffers(self.device, self.cmd_pool, 1, [rec.cmd])
        if rec.pool is not None:
            vk.vkDestroyDescriptorPool(self.device, rec.pool, None)
        self._free(rec.param_buf)

    def close(self) -> None:
        """Destroy every Vulkan object this device made."""
        if getattr(self, "device", None) is None:
            return
        try:
            vk.vkDeviceWaitIdle(self.device)
        except vk.VkError:  # device lost: nothing is running any more
            pass
        for rec in list(self.recordings):
            self._discard(rec)
        for pipeline, layout, set_layout, module in self.pipelines.values():
            vk.vkDestroyPipeline(self.device, pipeline, None)
            vk.vkDestroyPipelineLayout(self.device, layout, None)
            vk.vkDestroyDescriptorSetLayout(self.device, set_layout, None)
            vk.vkDestroyShaderModule(self.device, module, None)
        for b in list(self.buffers.values()):
            self._free(b)
        vk.vkDestroyFence(self.device, self.fence, None)
        vk.vkDestroyCommandPool(self.device, self.cmd_pool, None)
        vk.vkDestroyDevice(self.device, None)
        vk.vkDestroyInstance(self.instance, None)
        self.device = None
        self.failed = "it was closed"
